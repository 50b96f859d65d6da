"""The project's scripts (scripts/*.py: not a package) loaded as modules, for their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str):
    """``scripts/<name>.py`` as a fresh module named ``name`` (registered in ``sys.modules``: a script's
    dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

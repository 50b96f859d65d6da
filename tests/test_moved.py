"""Modules that moved keep their old import paths (``autagent.MOVED``): the old name is the very module
at the new one, with a DeprecationWarning naming it; a name that cannot follow says where it went."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import autagent


@pytest.mark.parametrize("old", sorted(autagent.MOVED))
def test_an_old_module_path_is_the_new_module(old):
    new = autagent.MOVED[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == module.__spec__.name == new  # the new module's own spec, not the old name's


def test_the_loader_names_of_the_old_plugin_module_name_autagent_api():
    from autagent.api import Plugin, load

    with pytest.raises(ImportError, match="autagent.plugin.load is now autagent.api.load"):
        from autagent.plugin import load as _  # noqa: F401
    with pytest.raises(AttributeError):
        autagent.plugin.nothing_here  # noqa: B018
    assert autagent.Plugin is Plugin and callable(load)


def test_old_paths_in_a_fresh_process():
    """``from autagent import Plugin`` and an old module path, imported first thing by a user's script."""
    code = "import autagent.trust; from autagent import Plugin; print(Plugin.__module__, autagent.trust.__name__)"
    out = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True, text=True
    )
    assert out.returncode != 0 and "autagent.trust moved to autagent.plugin.trust" in out.stderr
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["autagent.api", "autagent.plugin.trust"]

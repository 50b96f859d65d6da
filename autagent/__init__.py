"""AuTAgent: learn when and which acoustic tools a frozen audio reasoner should call.

Data flow: ``data`` (Sample) -> ``policies`` (tool subsets) -> ``tools`` (records) ->
``reasoners`` (answer) -> ``rewards`` -> ``grpo`` (update) -> ``plugin`` (export).

``from autagent import Plugin`` gives the trained plugin's Python API (:mod:`autagent.api`); it is
imported on first use, so that importing a low layer never imports the whole framework.  A module
that moved keeps its old name (:data:`MOVED`), with a warning that names the new one.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__version__ = "0.1.0"
__all__ = ["Plugin"]

MOVED = {
    "autagent.agentic": "autagent.reasoners.tool_loop",
    "autagent.backoff_fit": "autagent.evaluation.backoff_fit",
    "autagent.card": "autagent.plugin.card",
    "autagent.encoders": "autagent.reasoners.encoders",
    "autagent.evaluate": "autagent.evaluation.harness",
    "autagent.manifest": "autagent.plugin.manifest",
    "autagent.model_shapes": "autagent.policies.lm.plan.shapes",
    "autagent.phases": "autagent.evaluation.phases",
    "autagent.plan": "autagent.policies.lm.plan.arithmetic",
    "autagent.plan_report": "autagent.policies.lm.plan.report",
    "autagent.plan_terms": "autagent.policies.lm.plan.terms",
    "autagent.report": "autagent.evaluation.report",
    "autagent.selection_check": "autagent.evaluation.selection_check",
    "autagent.stream": "autagent.plugin.stream_session",
    "autagent.tables": "autagent.evaluation.tables",
    "autagent.tiny_models": "autagent.testing.tiny_models",
    "autagent.trust": "autagent.plugin.trust",
}
"""Old module -> where it lives now: ``import autagent.trust`` gives :mod:`autagent.plugin.trust` itself."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old name in :data:`MOVED` as the module at its new one (the same module object)."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(MOVED[spec.name])
        self.own_spec = module.__spec__  # the import machinery sets the old name's spec on it: put back
        return module

    def exec_module(self, module):
        module.__spec__ = self.own_spec


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())  # first: an old name must not find a stale copy elsewhere


def __getattr__(name):
    if name == "Plugin":
        from .api import Plugin

        return Plugin
    raise AttributeError(f"module 'autagent' has no attribute {name!r}")

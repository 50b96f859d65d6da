"""AuTAgent: learn when and which acoustic tools a frozen audio reasoner should call.

Data flow: ``data`` (Sample) -> ``policies`` (tool subsets) -> ``tools`` (records) ->
``reasoners`` (answer) -> ``rewards`` -> ``grpo`` (update) -> ``plugin`` (export).

``from autagent import Plugin`` gives the trained plugin's Python API (:mod:`autagent.api`); it is
imported on first use, so that importing a low layer never imports the whole framework.  Where a
module used to live is in docs/history.md ("Where things moved").
"""

__version__ = "0.1.0"
__all__ = ["Plugin"]


def __getattr__(name):
    if name == "Plugin":
        from .api import Plugin

        return Plugin
    raise AttributeError(f"module 'autagent' has no attribute {name!r}")

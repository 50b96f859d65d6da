"""A plugin folder, as the policies write it: :mod:`.manifest` (what it holds, its tools, the export),
:mod:`.trust` (content hashes, signatures, safe names), :mod:`.card` (the model card); and
:mod:`.stream_session`, a plugin on a clip that is still arriving.

These stand below the policies, which import them to export; loading a plugin (which opens the
policy that wrote it) and the :class:`~autagent.api.Plugin` class stand above them, in
:mod:`autagent.api`.  Nothing here imports that module.
"""

MOVED_TO_API = ("load", "run_tools", "verify", "policy_module")
"""What ``autagent.plugin`` held when it was the loader's module: now in :mod:`autagent.api`."""


def __getattr__(name):
    if name in MOVED_TO_API:
        raise ImportError(f"autagent.plugin.{name} is now autagent.api.{name}: from autagent.api import {name}")
    raise AttributeError(f"module 'autagent.plugin' has no attribute {name!r}")

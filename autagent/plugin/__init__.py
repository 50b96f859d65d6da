"""A plugin folder, as the policies write it: :mod:`.manifest` (what it holds, its tools, the export),
:mod:`.trust` (content hashes, signatures, safe names), :mod:`.card` (the model card); and
:mod:`.stream_session`, a plugin on a clip that is still arriving.

These stand below the policies, which import them to export; loading a plugin (which opens the
policy that wrote it) and the :class:`~autagent.api.Plugin` class stand above them, in
:mod:`autagent.api`.  Nothing here imports that module.
"""

"""A plugin folder, as the policies write it: :mod:`.manifest` (what it holds, its tools, the export),
:mod:`.trust` (content hashes, signatures, safe names), :mod:`.card` (the model card); and a plugin at
work: :mod:`.loaded` (:class:`~.loaded.Plugin`: select, augment chat messages, warm up) and
:mod:`.stream_session` (the same on a clip that is still arriving).

These stand below the policies, which import them to export.  Opening a plugin folder opens the policy
that wrote it, so it stands above them, in :mod:`autagent.api` (``load``, and ``Plugin.load`` on the
subclass ``from autagent import Plugin`` gives).  Nothing here imports that module.
"""

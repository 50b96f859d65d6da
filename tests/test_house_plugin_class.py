"""``Plugin`` lives with the plugin format (issue 64, item 4): what a loaded plugin does (select, augment,
stream, warm up) is :mod:`autagent.plugin.loaded`'s, below the policies; opening a folder, which opens the
policy that wrote it, stays above them in :mod:`autagent.api`.  The user's imports are unchanged."""

from __future__ import annotations

import ast
import inspect


def test_the_plugin_class_is_in_the_plugin_package_and_the_users_imports_still_give_it():
    import autagent
    import autagent.api
    from autagent import Plugin
    from autagent.plugin.loaded import Augmented
    from autagent.plugin.loaded import Plugin as AtWork

    assert Plugin is autagent.api.Plugin and issubclass(Plugin, AtWork)
    assert autagent.api.Augmented is Augmented
    own = set(vars(autagent.api.Plugin)) - {"__module__", "__doc__", "__qualname__", "__firstlineno__"}
    assert own - {"__static_attributes__"} == {"load"}  # the rest is the plugin package's
    for method in ("select", "augment", "augment_query", "stream", "warm", "set_dial", "remember", "read"):
        assert method in vars(AtWork), method


def test_the_plugin_package_imports_neither_the_api_nor_the_policies():
    from autagent.plugin import loaded

    for node in ast.walk(ast.parse(inspect.getsource(loaded))):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.module.split(".")[0] not in ("api", "policies"), node.module

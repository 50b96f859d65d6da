"""What a plugin's recorded ``training_config`` may decide when ``autagent adapt`` starts from it.

A plugin folder comes from someone else (its author).  Its weights, its tools and its selection and
training settings are what adapting it means; where the user's clips and answers are sent, which
secret authenticates them, which files are read or written and which modules are imported are the
operator's, and come from the user's command line and config alone (docs/design.md, "Who decides
what").  Before this, adapt started from the whole recorded config: a downloaded plugin chose
``reasoner.openai.base_url`` and ``api_key_env`` (the user's clips and ``Authorization: Bearer <any
environment variable>`` sent to its author's server), the data files, ``output_dir`` and the modules
``tools.extra`` imports.

:func:`plugin_settings` keeps, of the recorded config, only :data:`PLUGIN_DECIDES` (less
:data:`OPERATOR_DECIDES` inside it); every other field is the source run's context, not a setting for
this run, and is left out (the run's own value applies: the user's, else the default).  Three settings
the plugin cannot work without and may not choose, :data:`USER_MUST_SAY`, are refused with a one-line
error saying how to give them, unless the user gives them.
"""

from __future__ import annotations

from collections.abc import Iterable

from .trust import PluginError

PLUGIN_DECIDES = (
    "seed",
    "checkpoint_every",
    "data",
    "tools.enabled",
    "tools.profile",
    "tools.max_seconds",
    "policy.kind",
    "policy.router",
    "grpo",
    "reward",
    "eval",
)
"""Dotted prefixes a plugin's recorded config may set: the selection and training settings (the
router's shape and objective, GRPO's hyper-parameters, the reward, the benchmark's draw, the tools by
id, the evaluation's methods)."""

OPERATOR_DECIDES = (
    "data.benchmark.root",
    "data.benchmark.workers",
    "policy.router.text_model",
    "policy.router.backoff.calibration",
    "policy.router.backoff.audio_dir",
    "eval.agentic.audio_dir",
)
"""Fields inside :data:`PLUGIN_DECIDES` that name a path, a model to load or a resource of this machine:
never taken from a plugin, like every field outside :data:`PLUGIN_DECIDES` (``reasoner``,
``eval_reasoner``, ``output_dir``, ``answer_cache_dir``, ``logging``, ``launcher``, ``policy.init_from``
(adapt's), ``policy.lm`` (adapt trains routers), the tools' cache, executor, resources and Ray
address)."""

USER_MUST_SAY = {
    ("data.train", "data.dev", "data.test"): "which files adapt reads",
    ("tools.extra",): "which modules are imported",
    ("tools.settings",): "which models the tools load, from where, on which device",
}
"""Settings a plugin may need but may not choose: a recorded value that is set is refused unless the
user names the same setting (``--set`` or ``--config``); the recorded value is never used."""

REVIEWED_FREE_FORM = (
    "data.format",
    "data.benchmark.sizes",
    "data.benchmark.kinds",
    "data.benchmark.listening_kinds",
    "tools.enabled",
    "tools.profile",
    "policy.kind",
    "policy.router.inputs",
    "policy.router.scorer",
    "policy.router.new_tools",
    "policy.router.input_dropout",
    "policy.router.unfamiliar_fallback",
    "policy.router.backoff",
    "policy.router.backoff.rule",
    "policy.router.backoff.inputs",
    "policy.router.backoff.optional",
    "policy.router.credit",
    "policy.router.objective",
    "policy.router.table.design",
    "policy.router.table.outside",
    "policy.router.table.unasked",
    "policy.router.table.budget_counts",
    "policy.router.table.crossval.grid",
    "grpo.advantage",
    "reward.kind",
    "reward.signal",
    "eval.methods",
    "eval.add_tools",
    "eval.agentic.caller",
)
"""The string, list and mapping fields a plugin sets, each checked to hold names, choices or numbers
(never a path, an address or a module): tests/test_plugin_provenance.py fails on a new one until it
is classified here or in :data:`OPERATOR_DECIDES`."""


def _under(dotted: str, prefixes: Iterable[str]) -> bool:
    return any(dotted == p or dotted.startswith(p + ".") for p in prefixes)


def _above(dotted: str, prefixes: Iterable[str]) -> bool:
    return any(p.startswith(dotted + ".") for p in prefixes)


NOT_THE_PLUGINS = OPERATOR_DECIDES + tuple(f for fields in USER_MUST_SAY for f in fields)


def _kept(node: dict, where: str) -> dict:
    out = {}
    for key, value in node.items():
        if not isinstance(key, str):
            continue
        dotted = f"{where}.{key}" if where else key
        if _under(dotted, NOT_THE_PLUGINS):
            continue
        if _under(dotted, PLUGIN_DECIDES):
            nested = isinstance(value, dict) and _above(dotted, NOT_THE_PLUGINS)
            out[key] = _kept(value, dotted) if nested else value
        elif isinstance(value, dict) and _above(dotted, PLUGIN_DECIDES):
            out[key] = _kept(value, dotted)
    return out


def _recorded(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def plugin_settings(recorded, user_keys: Iterable[str], source: str, migrate=None) -> dict:
    """The part of a plugin's recorded ``training_config`` an adaptation starts from: what
    :data:`PLUGIN_DECIDES` allows, less :data:`OPERATOR_DECIDES`, after ``migrate`` (the config's
    :func:`autagent.config.migrate_moved`: a key that moved is judged where it is read now).  ``user_keys``
    are the dotted keys the user set (``--set``); a recorded :data:`USER_MUST_SAY` setting they do not name
    is refused (:class:`PluginError`, naming ``source``, the field, its value and the ``--set`` that gives it)."""
    if not isinstance(recorded, dict):
        raise PluginError(f"{source}: training_config must be a mapping, got {type(recorded).__name__}")
    recorded = migrate(recorded) if migrate is not None else recorded
    named = list(user_keys)
    for fields, what in USER_MUST_SAY.items():
        given = {f: _recorded(recorded, f) for f in fields}
        given = {f: v for f, v in given.items() if v not in (None, [], {}, "")}
        if given and not any(_under(k, fields) or _above(k, fields) for k in named):
            shown = ", ".join(f"{f}={v!r}" for f, v in given.items())
            raise PluginError(
                f"{source}: the plugin's training config sets {shown}; a plugin does not choose {what}: if you "
                f"mean it, give it yourself ({' '.join(f'--set {f}=...' for f in given)}, or --config)"
            )
    return _kept(recorded, "")

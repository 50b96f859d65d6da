"""The subcommands that use a plugin: ``select``, ``answer``, ``plugin verify|sign|backoff`` and
``check-selection``; those that make one are :mod:`.commands`'.  Each imports what it runs inside itself, so
that ``autagent --help`` stays light (see :mod:`autagent.cli`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .common import config_of, print_json


def cmd_select(args) -> int:
    from ..oneoff import run_select

    return run_select(args)


def cmd_answer(args) -> int:
    from ..oneoff import check_choices, check_clip, run_answer

    audio, choices = check_clip(args.audio), check_choices(args.choices, required=True)  # before any start-up
    config = config_of(args)
    config.reasoner.kind = args.reasoner or default_reasoner(args, config)
    if config.reasoner.kind == "embedded":
        from ..reasoners.simulator_notice import notice

        notice(audio)  # said before the wait, and on a cached answer too
    if not args.config and not any(s.startswith("tools.executor=") for s in args.set or []):
        config.tools.executor = "local"  # one clip: its tools in process, no Ray cluster to start
    return run_answer(args, config, audio, choices)


def default_reasoner(args, config, at_hand=None) -> str:
    """``answer``'s reasoner when ``--reasoner`` is not given: the config's where ``--config`` or ``--set
    reasoner.kind=`` names one; else the cascade (Gemma 3 270M, a real model, offline) where it is at hand
    (``make setup`` converts it), so a new user's first answer on their own clip is a model's; else the
    embedded simulator, which then says it is one (:mod:`autagent.reasoners.simulator_notice`).
    ``at_hand(cascade_config)`` says where the cascade's model is ("converted", "installed" or None;
    default :func:`~autagent.reasoners.simulator_notice.cascade_at_hand`)."""
    if args.config or any(s.startswith("reasoner.kind=") for s in args.set or []):
        return config.reasoner.kind
    if at_hand is None:
        from ..reasoners.simulator_notice import cascade_at_hand as at_hand
    found = at_hand(config.reasoner.cascade)
    if found == "installed":
        print(
            f"autagent: the cascade's Gemma 3 270M is converted once into {config.reasoner.cascade.cache_dir} "
            "(about a minute; every later command reuses it)",
            file=sys.stderr,
        )
    return "cascade" if found else "embedded"


def cmd_plugin_verify(args) -> int:
    from ..api import verify

    config = config_of(args)
    report = verify(args.directory, args.sha256, args.key, config.tools.profile, config.tools.settings)
    if args.hash and report["ok"]:  # for --plugin-sha256 $(autagent plugin verify DIR --hash)
        print(report["content_hash"])
        return 0
    print_json(report)
    return 0 if report["ok"] else 1


def cmd_plugin_sign(args) -> int:
    from ..plugin.manifest import read_manifest
    from ..plugin.trust import sign

    manifest = read_manifest(args.directory)
    manifest["signature"] = sign(manifest, args.key)
    path = Path(args.directory) / "manifest.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str))
    tmp.replace(path)
    print_json(
        {
            "plugin": str(args.directory),
            "content_hash": manifest["content_hash"],
            "signature": manifest["signature"]["kind"],
            "key_id": manifest["signature"]["key_id"],
        }
    )
    return 0


def cmd_plugin_backoff(args) -> int:
    from ..policies.router.backoff_fit import backoff_copy
    from ..recipes.run import load_splits

    config = config_of(args)
    splits = load_splits(config)
    flags = {k: v for k, v in {"rule": args.rule, "calibration": args.calibration}.items() if v}
    settings = {**config.policy.router.backoff, **flags}  # the config's policy.router.backoff, then the flags
    summary = backoff_copy(args.directory, args.out, splits.train, splits.dev, settings)
    print_json({"plugin": args.out, **{k: v for k, v in summary.items() if k != "curve"}})
    return 0


def cmd_check_selection(args) -> int:
    from ..api import load
    from ..data.labelled import load_labelled
    from ..evaluation.selection_check import check, description_selector, per_tool_table, table
    from ..plugin.manifest import read_manifest

    for path in args.plugin:  # a folder that is no plugin is refused before the stand-in clips are made
        read_manifest(path)
    items = load_labelled(args.queries, args.audio_dir)
    selectors, tools = {}, None
    for path in args.plugin:
        plugin = load(path, extra_tools=args.add_tools or ())
        selectors[f"plugin {path}"] = plugin.select_many
        tools = tools or plugin.tools
    selectors["Tools-with-Descriptions"] = description_selector(tools)
    result = check(selectors, items, args.optional or ())
    print(table(result))
    print(per_tool_table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0

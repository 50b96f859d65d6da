"""The subcommands that make and measure a plugin (``tools``, ``data``, ``train``, ``adapt``, ``eval``, ``plan``,
``sweep``, ``report``); those that use one are :mod:`.plugins`', the serving ones :mod:`.serving`'s.  Each
imports what it runs inside itself: see :mod:`autagent.cli`."""

from __future__ import annotations

import json
import os
import sys

from .common import config_of, overrides, print_json


def cmd_tools_run(args) -> int:
    from tools import parse_tool_list
    from tools.pool import ToolPool

    from ..oneoff import check_clip

    config = config_of(args)
    audio = check_clip(args.audio, config.tools.max_seconds)  # a bad clip or tool id: one line, before Ray starts
    tools = parse_tool_list(args.tools, config.tools.tool_ids)
    if args.executor:
        config.tools.executor = args.executor
    if args.no_cache:
        config.tools.cache_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"autagent-nocache-{os.getpid()}")
    pool = ToolPool(config.tools)
    records = pool.run(audio, tools)
    print_json(list(records.values()))
    return 1 if all("error" in r for r in records.values()) else 0


def cmd_tools_list(args) -> int:
    from tools import registry

    config = config_of(args)
    scored: dict[str, str] = {}
    if args.plugin:  # what the plugin has learned, and what it would score from a description alone
        from ..api import run_tools
        from ..plugin.manifest import read_manifest

        manifest = read_manifest(args.plugin)
        config.tools, extra = run_tools(config.tools, manifest)
        scored = {t["id"]: "learned" for t in manifest["tools"]} | {t: "zero-shot" for t in extra}
    enabled = config.tools.tool_ids
    rows = [
        {
            "id": s.id,
            "label": s.label,
            "enabled": s.id in enabled,
            "origin": registry.origin(s.id),
            "domains": list(s.domains),
            "backends": {p: b.name for p, b in s.backends.items()},
            "output": s.output,
            "description": s.description,
            **({"plugin": scored.get(s.id, "not scored")} if args.plugin else {}),
        }
        for s in registry.registered()
    ]
    print_json({"tools": rows, "enabled": list(enabled), "load_errors": registry.load_errors})
    return 0


def cmd_tools_precompute(args) -> int:
    from tools import parse_tool_list
    from tools.pool import ToolPool

    from ..data.loaders import load

    config = config_of(args)
    loaded = load(args.manifest, args.format)
    pool = ToolPool(config.tools)
    paths = sorted({s.audio for s in loaded.scorable})
    results = pool.run_many(paths, parse_tool_list(args.tools, config.tools.tool_ids), progress=True)
    errors = [(r["tool"], r["error"]) for rs in results for r in rs.values() if "error" in r]
    for tool, error in errors[:20]:
        print(f"error: {tool}: {error}", file=sys.stderr)
    print_json(
        {
            "rows": loaded.rows,
            "clips": len(paths),
            "computed": pool.computed,
            "cache_hits": pool.cache.hits,
            "errors": len(errors),
            "errors_by_tool": pool.errors,
            "unscorable_rows": len(loaded.rejected),
            "cache_dir": config.tools.cache_dir,
        }
    )
    return 0


def cmd_data_generate(args) -> int:
    from ..data.generator import generate

    config = config_of(args)
    if args.root:
        config.data.benchmark.root = args.root
    print_json({k: str(v) for k, v in generate(config.data.benchmark).items()})
    return 0


def cmd_data_validate(args) -> int:
    from ..data.loaders import load
    from ..recipes.run import clip_check

    check = clip_check(args.max_seconds) if not args.skip_audio else None
    loaded = load(args.file, args.format, audio_wording=args.audio_wording, check_audio=check)
    summary = loaded.summary()
    print(json.dumps(summary, ensure_ascii=False))
    for warning in loaded.warnings:  # rows kept that a user should know of (repeated choices)
        print(f"autagent: warning: {warning}", file=sys.stderr)
    if not summary["usable"]:
        print(f"autagent: {args.file}: no usable row of {loaded.rows}", file=sys.stderr)
        return 1
    if loaded.rejected and not args.allow_rejects:
        first = loaded.rejected[0]
        print(
            f"autagent: {args.file}: {len(loaded.rejected)} of {loaded.rows} rows rejected (first: row "
            f"{first['row']}, id {first['id']}: {first['reason']}); fix them, or pass --allow-rejects",
            file=sys.stderr,
        )
        return 1
    return 0


def accelerate_command(config, argv: list[str]) -> list[str] | None:
    """The ``accelerate launch`` command that re-runs this ``train`` under the launcher, or None when
    the config asks for no launcher or we already run under one."""
    if config.launcher.kind != "accelerate" or "LOCAL_RANK" in os.environ or "ACCELERATE_LAUNCHED" in os.environ:
        return None
    command = [sys.executable, "-m", "accelerate.commands.launch"]
    if config.launcher.accelerate_config:
        command += ["--config_file", config.launcher.accelerate_config]
    if config.launcher.num_processes:
        command += ["--num_processes", str(config.launcher.num_processes)]
    return command + ["-m", "autagent.cli", *argv]


def cmd_train(args) -> int:
    from ..recipes.train import refuse_what_will_not_fit, run_train

    config = config_of(args)
    if not args.force:
        refuse_what_will_not_fit(config)
    relaunch = accelerate_command(config, args.argv)
    if relaunch is not None:
        import subprocess

        print("launching:", " ".join(relaunch), flush=True)
        return subprocess.call(relaunch, env={**os.environ, "ACCELERATE_LAUNCHED": "1"})
    metrics = run_train(config, resume=args.resume, force=args.force)
    if metrics is not None and "methods" in metrics:
        _print_summary(metrics)
    return 0


def cmd_adapt(args) -> int:
    from ..oneoff import UsageError
    from ..plugin.card import certificate_lines
    from ..policies.router.table import CertifyConfig
    from ..reasoners.base import ReasonerFailing
    from ..recipes.adapt import adapt_config, hold_out, run_adapt
    from ..recipes.certify import DEFAULT_BUDGET

    certify_with = None if args.certify is None else CertifyConfig(enabled=True, eps=args.certify)
    given = overrides(args.set)
    if args.upstream:  # the same words as serve's: a served model is the openai reasoner at that address
        if args.reasoner not in (None, "openai"):
            raise UsageError(f"--upstream names a served model: it is --reasoner openai, not {args.reasoner}")
        given = {
            "reasoner.openai.base_url": args.upstream,
            **({"reasoner.openai.model": args.model} if args.model else {}),
            **given,
        }
    elif args.reasoner is None:
        raise UsageError("adapt needs --reasoner NAME, or --upstream URL for a served model")
    reasoner = "openai" if args.upstream else args.reasoner
    config = adapt_config(args.plugin, reasoner, args.out, args.budget, args.tool_cost, args.config, given)
    config = hold_out(config, certify_with)
    try:
        summary = run_adapt(config, args.out, resume=args.resume)
    except ReasonerFailing as err:
        raise ReasonerFailing(
            f"{err}. Every answer given so far is kept in {config.answer_cache_dir} and counted in "
            f"{config.run_dir / 'budget.json'}: run the same command with --resume to continue"
        ) from None
    table, found = summary.get("table") or {}, summary.get("crossval")
    print(f"adapted {args.plugin} to {summary['reasoner']} -> {args.out}")
    held, budget = config.policy.router.table.held_out, args.budget or DEFAULT_BUDGET
    reserve = f" ({budget} less {budget - table.get('budget', 0)} for the certificate's {held} held-out queries)"
    reserve = reserve if held else ""
    print(
        f"  answers: {table.get('answers_spent')} of a budget of {table.get('budget') or 'no cap'}{reserve}; "
        f"{table.get('queries')} training queries in the table ({table.get('queries_left_out')} left out)"
    )
    used, left_out = table.get("queries") or 0, table.get("queries_left_out") or 0
    if left_out > used:  # a small budget trains on a handful of queries: say so where it is seen
        needed = (used + left_out) * (table.get("subsets_per_query") or 1)
        print(
            f"autagent: warning: the budget completed only {used} of {used + left_out} training queries; the "
            f"whole table takes about {needed} answers (--budget {needed})",
            file=sys.stderr,
        )
    if found:
        best = next(c for c in found["candidates"] if c["candidate"] == found["chosen"])
        print(
            f"  cross-validated ({found['folds']} folds, price {found['price']}): chose {found['chosen']}, held-out "
            f"accuracy {100 * best['accuracy']:.1f} %, {best['avg_tools']:.2f} tools, reward {best['reward']:+.3f}"
        )
    for line in certificate_lines(summary["certificate"]) if summary.get("certificate") else []:
        print(f"  {line}")
    print(f"  evaluate it: autagent eval --plugin {args.out} --reasoner {args.reasoner} [--config ...]")
    return 0


def cmd_eval(args) -> int:
    from ..plugin.manifest import read_manifest
    from ..recipes.evaluate import run_eval

    if args.plugin:  # a folder that is no plugin, or not the pinned one: refused before the data and the tools
        read_manifest(args.plugin, args.plugin_sha256)
    config = config_of(args)
    if args.dataset:
        config.data.test = args.dataset
    if args.reasoner:
        target = config.eval_reasoner or config.reasoner
        target.kind = args.reasoner
    from ..plugin.dial import Dial

    Dial(args.max_tools, args.latency_budget_ms, args.dial_tools)  # a bad value: one line, before data and tools
    config.eval.max_tools, config.eval.latency_budget_ms = args.max_tools, args.latency_budget_ms
    config.eval.tools, config.eval.uncertified = args.dial_tools, args.uncertified
    out = args.out or str(config.run_dir / "eval")
    metrics = run_eval(config, out, args.plugin, log_to_wandb=True, expected_sha256=args.plugin_sha256)
    _print_summary(metrics)
    print(f"wrote {out}/metrics.json, report.md, predictions.jsonl")
    found = metrics.get("incomplete")
    if found:  # said last, where a user looks: a broken run is not a bad model
        print(
            f"autagent: error: {found['failed_answers']} of {found['calls']} reasoner calls failed (last: "
            f"{found.get('last_failure') or '?'}): the figures in {out} count them as wrong and are marked incomplete",
            file=sys.stderr,
        )
        return 1
    return 0


def _print_summary(metrics: dict) -> None:
    from ..evaluation.report import label, reasoner_title, small_sample_warning, with_interval

    n = metrics["n"]
    print(f"{metrics['dataset']}: {n} questions, reasoner {reasoner_title(metrics['reasoner'])}")
    official = any(abs(m["official"]["accuracy"] - m["accuracy"]) > 1e-9 for m in metrics["methods"].values())
    for name, m in metrics["methods"].items():
        print(
            f"  {label(name):28s} acc {with_interval(m['accuracy'], n):17s}"
            + (f" official {100 * m['official']['accuracy']:5.1f}" if official else "")
            + f"  errors {m['errors']:3d}  avg tools {m['avg_tools']:.2f}"
        )
    warning = small_sample_warning(n)
    if warning:
        print(f"  {warning}")
    unscorable = metrics.get("unscorable") or []
    if unscorable:  # named, so a missing clip is found without reading metrics.json
        print(f"could not score {len(unscorable)} of {metrics['n']} rows (wrong in acc, left out of official):")
        for row in unscorable[:10]:
            print(f"  row {row['row']} ({row['id']}): {row['reason']}")
        if len(unscorable) > 10:
            print(f"  ... and {len(unscorable) - 10} more: metrics.json, 'unscorable'")


def cmd_plan(args) -> int:
    from ..policies.lm.plan.report import main_plan

    table, fits = main_plan(config_of(args), args.gpu_memory, args.prompt_tokens)
    print(table)
    return 0 if fits else 1


def cmd_sweep(args) -> int:
    from ..recipes.sweep import run_sweep

    summary = run_sweep(args.sweep, resume=args.resume, only=args.only)
    print(summary["table"])
    return 0


def cmd_report(args) -> int:
    from ..evaluation.tables import TableError, record, write_tables

    try:
        if args.report_command == "record":
            print(record(args.folder, args.name, commit=args.commit, about=args.about, test=args.test))
            return 0
        differ = write_tables(args.root, check=args.check)
    except TableError as err:
        print(f"autagent: error: {err}", file=sys.stderr)
        return 2
    for line in differ:
        print(f"{line} {'differs from' if args.check else 'rewritten from'} its records", file=sys.stderr)
    if args.check and differ:
        print("autagent: run `autagent report tables` (or fix the record it names)", file=sys.stderr)
    return 1 if args.check and differ else 0

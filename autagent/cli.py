"""``autagent`` command line: every subcommand (``autagent --help`` lists them).

Every error a user can cause (a bad config, dataset, clip, plugin or key) ends in one line
``autagent: error: ...`` naming the file, row or field, and exit code 2; never a traceback.

The package's own modules are imported inside each subcommand, not here: most of them pull torch, Ray or
transformers, and ``autagent --help``, a bad ``--set`` or ``autagent select`` on a clip that is not audio
should answer in a fraction of a second, before any of those load (``tests/test_cli_quiet.py``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path


def _quiet_environment() -> None:
    for key, value in {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "RAY_USAGE_STATS_ENABLED": "0",
        "TOKENIZERS_PARALLELISM": "false",
        "PYANNOTE_METRICS_ENABLED": "0",
    }.items():
        os.environ.setdefault(key, value)
    import warnings

    warnings.filterwarnings("ignore", message="pkg_resources is deprecated")
    logging.basicConfig(level=logging.INFO, format="autagent: %(message)s", stream=sys.stderr)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar for every model load
    for noisy in ("httpx", "httpx2", "ray", "urllib3", "filelock", "numba", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _overrides(pairs: list[str] | None) -> dict:
    import yaml

    from .config import ConfigError

    result = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            result[key] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {key}: value is not YAML ({err})") from err
    return result


def _config(args):
    from .config import load_config

    overrides = _overrides(getattr(args, "set", None))
    if getattr(args, "profile", None):
        overrides["tools.profile"] = args.profile
    return load_config(getattr(args, "config", None), overrides)


def _print(obj) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False))


def cmd_tools_run(args) -> int:
    from tools import parse_tool_list
    from tools.pool import ToolPool

    from .oneoff import check_clip

    config = _config(args)
    audio = check_clip(args.audio, config.tools.max_seconds)  # a bad clip or tool id: one line, before Ray starts
    tools = parse_tool_list(args.tools, config.tools.tool_ids)
    if args.executor:
        config.tools.executor = args.executor
    if args.no_cache:
        config.tools.cache_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"autagent-nocache-{os.getpid()}")
    pool = ToolPool(config.tools)
    records = pool.run(audio, tools)
    _print(list(records.values()))
    return 1 if all("error" in r for r in records.values()) else 0


def cmd_tools_list(args) -> int:
    from tools import registry

    config = _config(args)
    scored: dict[str, str] = {}
    if args.plugin:  # what the plugin has learned, and what it would score from a description alone
        from .api import run_tools
        from .plugin.manifest import read_manifest

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
    _print({"tools": rows, "enabled": list(enabled), "load_errors": registry.load_errors})
    return 0


def cmd_tools_precompute(args) -> int:
    from tools import parse_tool_list
    from tools.pool import ToolPool

    from .data.loaders import load

    config = _config(args)
    loaded = load(args.manifest, args.format)
    pool = ToolPool(config.tools)
    paths = sorted({s.audio for s in loaded.scorable})
    results = pool.run_many(paths, parse_tool_list(args.tools, config.tools.tool_ids), progress=True)
    errors = [(r["tool"], r["error"]) for rs in results for r in rs.values() if "error" in r]
    for tool, error in errors[:20]:
        print(f"error: {tool}: {error}", file=sys.stderr)
    _print(
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
    from .data.generator import generate

    config = _config(args)
    if args.root:
        config.data.benchmark.root = args.root
    _print({k: str(v) for k, v in generate(config.data.benchmark).items()})
    return 0


def cmd_data_validate(args) -> int:
    from .data.loaders import load
    from .recipes.run import clip_check

    check = clip_check(args.max_seconds) if not args.skip_audio else None
    loaded = load(args.file, args.format, audio_wording=args.audio_wording, check_audio=check)
    summary = loaded.summary()
    print(json.dumps(summary, ensure_ascii=False))
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
    from .recipes.train import refuse_what_will_not_fit, run_train

    config = _config(args)
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
    from .reasoners.base import ReasonerFailing
    from .recipes.adapt import adapt_config, run_adapt

    config = adapt_config(
        args.plugin, args.reasoner, args.out, args.budget, args.tool_cost, args.config, _overrides(args.set)
    )
    try:
        summary = run_adapt(config, args.out, resume=args.resume)
    except ReasonerFailing as err:
        raise ReasonerFailing(
            f"{err}. Every answer given so far is kept in {config.answer_cache_dir} and counted in "
            f"{config.run_dir / 'budget.json'}: run the same command with --resume to continue"
        ) from None
    table, found = summary.get("table") or {}, summary.get("crossval")
    print(f"adapted {args.plugin} to {summary['reasoner']} -> {args.out}")
    print(
        f"  answers: {table.get('answers_spent')} of a budget of {table.get('budget') or 'no cap'}; "
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
    print(f"  evaluate it: autagent eval --plugin {args.out} --reasoner {args.reasoner} [--config ...]")
    return 0


def cmd_eval(args) -> int:
    from .plugin.manifest import read_manifest
    from .recipes.evaluate import run_eval

    if args.plugin:  # a folder that is no plugin, or not the pinned one: refused before the data and the tools
        read_manifest(args.plugin, args.plugin_sha256)
    config = _config(args)
    if args.dataset:
        config.data.test = args.dataset
    if args.reasoner:
        target = config.eval_reasoner or config.reasoner
        target.kind = args.reasoner
    if args.max_tools is not None or args.latency_budget_ms is not None:
        from .plugin.dial import Dial

        Dial(args.max_tools, args.latency_budget_ms)  # a bad value: one line, before the data and the tools
        config.eval.max_tools, config.eval.latency_budget_ms = args.max_tools, args.latency_budget_ms
    out = args.out or str(config.run_dir / "eval")
    metrics = run_eval(config, out, args.plugin, log_to_wandb=True, expected_sha256=args.plugin_sha256)
    _print_summary(metrics)
    print(f"wrote {out}/metrics.json, report.md, predictions.jsonl")
    return 0


def _print_summary(metrics: dict) -> None:
    from .evaluation.report import label, reasoner_title, small_sample_warning, with_interval

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


def cmd_select(args) -> int:
    from .oneoff import run_select

    return run_select(args)


def cmd_answer(args) -> int:
    from .oneoff import check_choices, check_clip, run_answer

    audio, choices = check_clip(args.audio), check_choices(args.choices, required=True)  # before any start-up
    config = _config(args)
    config.reasoner.kind = args.reasoner
    if not args.config and not any(s.startswith("tools.executor=") for s in args.set or []):
        config.tools.executor = "local"  # one clip: its tools in process, no Ray cluster to start
    return run_answer(args, config, audio, choices)


def cmd_plugin_verify(args) -> int:
    from .api import verify

    config = _config(args)
    report = verify(args.directory, args.sha256, args.key, config.tools.profile, config.tools.settings)
    if args.hash and report["ok"]:  # for --plugin-sha256 $(autagent plugin verify DIR --hash)
        print(report["content_hash"])
        return 0
    _print(report)
    return 0 if report["ok"] else 1


def cmd_plugin_sign(args) -> int:
    from .plugin.manifest import read_manifest
    from .plugin.trust import sign

    manifest = read_manifest(args.directory)
    manifest["signature"] = sign(manifest, args.key)
    path = Path(args.directory) / "manifest.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str))
    tmp.replace(path)
    _print(
        {
            "plugin": str(args.directory),
            "content_hash": manifest["content_hash"],
            "signature": manifest["signature"]["kind"],
            "key_id": manifest["signature"]["key_id"],
        }
    )
    return 0


def cmd_plugin_backoff(args) -> int:
    from .policies.router.backoff_fit import backoff_copy
    from .recipes.run import load_splits

    config = _config(args)
    splits = load_splits(config)
    flags = {k: v for k, v in {"rule": args.rule, "calibration": args.calibration}.items() if v}
    settings = {**config.policy.router.backoff, **flags}  # the config's policy.router.backoff, then the flags
    summary = backoff_copy(args.directory, args.out, splits.train, splits.dev, settings)
    _print({"plugin": args.out, **{k: v for k, v in summary.items() if k != "curve"}})
    return 0


def cmd_check_selection(args) -> int:
    from .api import load
    from .data.labelled import load_labelled
    from .evaluation.selection_check import check, description_selector, per_tool_table, table
    from .plugin.manifest import read_manifest

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


def cmd_serve(args) -> int:
    import uvicorn

    from .serve import build, create_app
    from .serve.connections import uvicorn_config
    from .serve.options import KEY_ON_COMMAND_LINE, from_args

    config = _config(args)
    if not args.config and not any(s.startswith("tools.executor=") for s in args.set or []):
        config.tools.executor = "local"  # a service runs its tools in process unless told otherwise
    if args.api_key is not None:
        print(f"autagent serve: {KEY_ON_COMMAND_LINE}", file=sys.stderr, flush=True)
    service = build(config, from_args(args))
    options = service.options
    print(
        f"autagent serve: http://{options.host}:{options.port}/v1 ({service.upstream.name}"
        f"{', plugin ' + service.plugin.content_hash[:12] if service.plugin else ''}"
        f"{', clients must present the API key' if options.api_key else ''})",
        file=sys.stderr,
        flush=True,
    )
    app = create_app(service)  # a WebSocket message is refused past the largest realtime event (the SDK's 16 MiB)
    config = uvicorn_config(
        app,
        options.host,
        options.port,
        options.connection_limits(),
        log_config=serve_log_config(),
        access_log=not args.quiet,
        ws_max_size=service.max_event_bytes,
    )
    uvicorn.Server(config).run()
    return 0


def serve_log_config() -> dict:
    """uvicorn's logging for ``serve``: its own messages from warnings up, and one access line per request
    on stderr (``autagent serve: 127.0.0.1:5678 "POST /v1/chat/completions HTTP/1.1" 200``) unless
    ``--quiet``."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["access"]["fmt"] = 'autagent serve: %(client_addr)s "%(request_line)s" %(status_code)s'
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    config["loggers"]["uvicorn"]["level"] = "WARNING"
    config["loggers"]["uvicorn.error"]["level"] = "WARNING"
    return config


def cmd_upstream(args) -> int:
    from .config import ConfigError
    from .serve.vllm import VLLMError, start, stop

    extra = args.vllm_args[1:] if args.vllm_args[:1] == ["--"] else args.vllm_args
    try:
        process, url = start(args.model, args.port, extra, args.venv, args.log, args.timeout)
    except VLLMError as err:
        raise ConfigError(str(err)) from None
    print(url, flush=True)
    print(f"autagent upstream: vLLM serves {args.model} (log {process.log_path}); Ctrl-C stops it", file=sys.stderr)
    try:
        return process.wait()
    finally:
        stop(process)


def cmd_mcp(args) -> int:
    from .serve.mcp_server import McpOptions, serve_mcp
    from .serve.options import KEY_ON_COMMAND_LINE, LOCAL_HOSTS, read_key_file

    config = _config(args)
    if not args.config and not any(s.startswith("tools.executor=") for s in args.set or []):
        config.tools.executor = "local"  # like serve: tools in process unless told otherwise
    if args.api_key is not None:
        print(f"autagent mcp: {KEY_ON_COMMAND_LINE}", file=sys.stderr, flush=True)
    api_key = args.api_key or os.environ.get("AUTAGENT_API_KEY") or None
    if args.api_key_file:
        api_key = read_key_file(args.api_key_file)
    options = McpOptions(
        args.transport,
        args.allow_dir or [],
        max_audio_bytes=int(args.max_audio_mb * 2**20),
        api_key=api_key,
        allowed_hosts=args.allowed_hosts or list(LOCAL_HOSTS),
        allowed_origins=args.allowed_origins or [],
    )
    serve_mcp(config, args.plugin, options, args.host, args.port, args.plugin_sha256)
    return 0


def cmd_plan(args) -> int:
    from .policies.lm.plan.report import main_plan

    table, fits = main_plan(_config(args), args.gpu_memory, args.prompt_tokens)
    print(table)
    return 0 if fits else 1


def cmd_sweep(args) -> int:
    from .recipes.sweep import run_sweep

    summary = run_sweep(args.sweep, resume=args.resume, only=args.only)
    print(summary["table"])
    return 0


def cmd_report(args) -> int:
    from .evaluation.tables import TableError, record, write_tables

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


class Parser(argparse.ArgumentParser):
    """A parser, and every subcommand's (argparse makes them of the parent's class), that takes no
    abbreviation: a mistyped or shortened flag is an error, never another flag (``serve --api-key X``
    once set ``--api-key-env``); help taken from docstrings loses their reStructuredText quotes."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        for key in ("description", "help"):
            if isinstance(kwargs.get(key), str):
                kwargs[key] = kwargs[key].replace("``", "")
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        if isinstance(kwargs.get("help"), str):
            kwargs["help"] = kwargs["help"].replace("``", "")
        return super().add_argument(*args, **kwargs)


CHOICES_HELP = "the answer choices, each one argument: --choices '90 BPM' '120 BPM'"


def build_parser() -> argparse.ArgumentParser:
    from .serve.options import add_flags

    parser = Parser(prog="autagent")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p):
        p.add_argument("--config", help="experiment YAML (default: the embedded defaults)")
        p.add_argument(
            "--set", action="append", metavar="KEY=VALUE", help="override a config field, e.g. grpo.steps=50"
        )
        return p

    def with_query(p, required: bool):
        p.add_argument("--plugin", required=True, metavar="DIR", help="a plugin folder (make train writes one)")
        p.add_argument("--audio", required=required, metavar="CLIP", help="the clip: wav, flac, mp3, ogg ...")
        p.add_argument("--question", required=required, help="the question asked about the clip")
        p.add_argument(
            "--profile",
            choices=["embedded", "cluster"],
            help="the tools' backends: embedded (offline, CPU) or cluster (the paper's); default the plugin's",
        )
        return p

    def with_dial(p):
        p.add_argument(
            "--max-tools",
            type=int,
            metavar="K",
            help="the dial: call at most K tools per query, the plugin's most probable first (default: its threshold)",
        )
        p.add_argument(
            "--latency-budget-ms",
            type=float,
            metavar="MS",
            help="the dial: call tools, most probable first, while their seconds measured at export fit in MS",
        )
        return p

    def with_pin(p):
        p.add_argument("--plugin-sha256", metavar="HEX", help="refuse the plugin unless its content hash is HEX")
        return p

    tools = sub.add_parser("tools", help="the acoustic tools").add_subparsers(dest="tools_command", required=True)
    run = with_config(tools.add_parser("run", help="print the JSON records of tools on one clip"))
    run.add_argument("audio")
    run.add_argument("--tools", help="comma-separated tool ids (default: the enabled ones)")
    run.add_argument("--profile", choices=["embedded", "cluster"])
    run.add_argument("--executor", choices=["ray", "local"])
    run.add_argument("--no-cache", action="store_true", help="compute afresh (a private cache for this call)")
    run.set_defaults(func=cmd_tools_run)
    lst = with_config(tools.add_parser("list", help="print the tool registry (JSON)"))
    lst.add_argument("--plugin", help="also say which tools a plugin has learned and which it scores zero-shot")
    lst.set_defaults(func=cmd_tools_list)
    pre = with_config(tools.add_parser("precompute", help="fill the tool cache for a dataset file"))
    pre.add_argument("manifest", help="MMAU/MMAR/AVQA file")
    pre.add_argument("--format", default="auto")
    pre.add_argument("--tools")
    pre.add_argument("--profile", choices=["embedded", "cluster"])
    pre.set_defaults(func=cmd_tools_precompute)

    data = sub.add_parser("data", help="datasets").add_subparsers(dest="data_command", required=True)
    gen = with_config(data.add_parser("generate", help="generate the embedded benchmark"))
    gen.add_argument("--root")
    gen.set_defaults(func=cmd_data_generate)
    val = data.add_parser(
        "validate",
        help="check a benchmark file as eval will read it: every row, its clip decoded, ids unique (JSON report)",
    )
    val.add_argument("file")
    val.add_argument("--format", default="auto", choices=["auto", "mmau", "mmar", "avqa"])
    val.add_argument("--audio-wording", action="store_true", help="AVQA: 'video' -> 'audio' in questions")
    val.add_argument("--allow-rejects", action="store_true", help="exit 0 when some rows are rejected")
    val.add_argument("--skip-audio", action="store_true", help="do not open the clips (rows and fields only)")
    val.add_argument(
        "--max-seconds", type=float, default=30.0, help="how much of each clip must decode (the tools' default)"
    )
    val.set_defaults(func=cmd_data_validate)

    train = with_config(sub.add_parser("train", help="the main job: train, evaluate, export the plugin"))
    train.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    train.add_argument("--force", action="store_true", help="start on CUDA even where the memory plan says no")
    train.set_defaults(func=cmd_train)

    ad = with_config(sub.add_parser("adapt", help="adapt a router plugin to the reasoner in front of it"))
    ad.add_argument("--plugin", required=True, help="the router plugin to start from")
    ad.add_argument("--reasoner", required=True, choices=["embedded", "qwen2-audio", "openai", "cascade"])
    ad.add_argument("--out", required=True, help="where the adapted plugin is written")
    ad.add_argument("--budget", type=int, help="distinct reasoner answers the adaptation may ask (cache hits free)")
    ad.add_argument("--tool-cost", type=float, help="your price of one tool call, in answers (default 0: accuracy)")
    ad.add_argument("--resume", action="store_true", help="continue a stopped adaptation (its answers are kept)")
    ad.set_defaults(func=cmd_adapt)

    ev = with_pin(with_config(sub.add_parser("eval", help="every baseline (and a plugin's policy) on a dataset")))
    ev.add_argument("--out", help="output directory (default runs/<name>/eval)")
    ev.add_argument("--dataset", help="an MMAU/MMAR/AVQA file to evaluate on")
    ev.add_argument("--reasoner", choices=["embedded", "qwen2-audio", "openai", "cascade"])
    ev.add_argument("--plugin", help="a trained plugin directory")
    with_dial(ev)
    ev.set_defaults(func=cmd_eval)

    sel = with_pin(
        sub.add_parser(
            "select",
            help="a plugin's tool choice for a clip and question (JSON; --explain: why, as a table)",
            description="Load a plugin and print the tools it calls for a clip and question, with the "
            "probability that decided each. --explain says which part decided each tool (the router, the "
            "back-off on wording unlike training, the zero-shot head for a tool added after training); "
            "--batch runs many clips in one load.",
        )
    )
    with_query(sel, required=False)
    sel.add_argument("--choices", nargs="+", metavar="CHOICE", help=CHOICES_HELP + " (optional: the router reads them)")
    sel.add_argument(
        "--batch",
        metavar="FILE|DIR",
        help="many clips in one load: a JSONL or JSON-list file of {audio, question, choices}, or a folder of "
        "clips asked --question; prints one JSON line per clip",
    )
    sel.add_argument("--explain", action="store_true", help="per tool: who decided and with what probability")
    sel.add_argument("--json", action="store_true", help="with --explain: JSON instead of the table")
    with_dial(sel)
    sel.set_defaults(func=cmd_select)

    ans = with_pin(with_config(sub.add_parser("answer", help="select tools with a plugin, run them, ask a reasoner")))
    with_query(ans, required=True)
    ans.add_argument(
        "--choices", nargs="+", metavar="CHOICE", required=True, help=CHOICES_HELP + " (the reasoner picks one)"
    )
    ans.add_argument("--reasoner", default="embedded", choices=["embedded", "qwen2-audio", "openai", "cascade"])
    ans.set_defaults(func=cmd_answer)

    plugin = sub.add_parser("plugin", help="check or sign a plugin").add_subparsers(
        dest="plugin_command", required=True
    )
    ver = with_config(
        plugin.add_parser("verify", help="every check a load makes, as a JSON report (its content_hash: the pin)")
    )
    ver.add_argument("directory")
    ver.add_argument("--sha256", help="the content hash it must have")
    ver.add_argument("--key", help="public key (ed25519 PEM) or HMAC secret file to verify the signature with")
    ver.add_argument(
        "--hash", action="store_true", help="print only the content hash (the JSON report if a check fails)"
    )
    ver.set_defaults(func=cmd_plugin_verify)
    sgn = plugin.add_parser(
        "sign", help="sign a plugin's content hash (ed25519 private key PEM, or an HMAC secret file)"
    )
    sgn.add_argument("directory")
    sgn.add_argument("--key", required=True)
    sgn.set_defaults(func=cmd_plugin_sign)
    bko = with_config(plugin.add_parser("backoff", help="a copy of a router plugin with a fitted back-off"))
    bko.add_argument("directory")
    bko.add_argument("--out", required=True, help="the new plugin folder (must not exist)")
    bko.add_argument("--rule", choices=["vote", "fill"], help="how the zero-shot head speaks (default vote)")
    bko.add_argument("--calibration", help="labelled phrasings for the cut (JSONL; default the project's own)")
    bko.set_defaults(func=cmd_plugin_backoff)

    cs = sub.add_parser("check-selection", help="a plugin's tool choices on a hand-labelled question set (transfer)")
    cs.add_argument("--plugin", action="append", required=True, help="a plugin folder (repeat to compare)")
    cs.add_argument("--queries", default="experiments/transfer/questions.jsonl", help="the labelled questions (JSONL)")
    cs.add_argument("--optional", nargs="*", help="tools neither credited nor penalised (e.g. sound_events)")
    cs.add_argument("--add-tools", nargs="*", help="tools the plugins never trained with, scored zero-shot")
    cs.add_argument("--audio-dir", default=".cache/stand-in-audio", help="where the stand-in clips are made")
    cs.add_argument("--out", help="write the result as JSON here")
    cs.set_defaults(func=cmd_check_selection)

    sv = with_config(
        sub.add_parser(
            "serve",
            help="an OpenAI-compatible service, a plugin in front",
            description="POST /v1/chat/completions and /v1/select, GET /health, /v1/models and /metrics, and the "
            "WebSocket /v1/realtime (OpenAI Realtime API events, text out: session.update, conversation.item.create, "
            "input_audio_buffer.append/commit/clear, response.create -> session.created/updated, "
            "input_audio_buffer.committed, response.created, response.output_text.delta/done, response.done, "
            "error): the tools start on the audio while it is streamed (docs/design.md).",
        )
    )
    add_flags(sv)
    sv.add_argument("--quiet", action="store_true", help="no access line per request on stderr")
    sv.set_defaults(func=cmd_serve)

    up = sub.add_parser("upstream", help="a model server to put autagent serve in front of")
    up = up.add_subparsers(dest="upstream_command", required=True)
    ups = up.add_parser("start", help="vLLM's CPU build (make setup-vllm) on loopback; prints its base URL")
    ups.add_argument("--model", required=True, help="a model folder (config.json, weights, tokenizer)")
    ups.add_argument("--port", type=int, default=0, help="the port (default: a free one)")
    ups.add_argument("--venv", default=".venv-vllm", help="vLLM's virtualenv (default .venv-vllm)")
    ups.add_argument("--log", help="append vLLM's output to this file (default: a temporary file)")
    ups.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for /health (default 600)")
    ups.add_argument("vllm_args", nargs=argparse.REMAINDER, help="after --: vLLM's own flags (--dtype float32 ...)")
    ups.set_defaults(func=cmd_upstream)

    mc = with_pin(with_config(sub.add_parser("mcp", help="the acoustic tools as an MCP server (stdio or HTTP)")))
    mc.add_argument("--plugin", help="a trained plugin: its tools, and `select` for a question")
    mc.add_argument(
        "--transport", choices=["stdio", "http"], default="stdio", help="stdio (default) or streamable HTTP"
    )
    mc.add_argument("--allow-dir", action="append", metavar="DIR", help="over HTTP: a folder whose files may be named")
    mc.add_argument("--host", default="127.0.0.1")
    mc.add_argument("--port", type=int, default=8000)
    mc.add_argument("--max-audio-mb", type=float, default=25.0, help="largest clip accepted as bytes")
    mc.add_argument(
        "--api-key", metavar="KEY", help="over HTTP: the key clients must present (default $AUTAGENT_API_KEY)"
    )
    mc.add_argument("--api-key-file", metavar="FILE", help="over HTTP: read the clients' key from this file")
    mc.add_argument(
        "--allowed-hosts",
        nargs="+",
        metavar="HOST",
        help="over HTTP: Host header values served, as serve's (default localhost's names; * any)",
    )
    mc.add_argument(
        "--allowed-origins", nargs="+", metavar="ORIGIN", help="over HTTP: browser origins served (default none)"
    )
    mc.set_defaults(func=cmd_mcp)

    pl = with_config(sub.add_parser("plan", help="the LM policy's memory per GPU under a config (a table)"))
    pl.add_argument("--gpu-memory", type=float, metavar="GB", help="say whether the run fits a card of this size")
    pl.add_argument("--prompt-tokens", type=int, metavar="N", help="measured prompt length, clip included")
    pl.set_defaults(func=cmd_plan)

    sw = sub.add_parser("sweep", help="run an experiment's variants over its seeds and aggregate mean ± std")
    sw.add_argument("sweep", help="a sweep YAML (experiments/sweeps/*.yaml)")
    sw.add_argument("--resume", action="store_true", help="reuse finished runs")
    sw.add_argument("--only", help="comma-separated variant names")
    sw.set_defaults(func=cmd_sweep)

    rep = sub.add_parser("report", help="result tables from recorded runs and sweeps (docs/results/)")
    rep = rep.add_subparsers(dest="report_command", required=True)
    rec = rep.add_parser("record", help="write docs/results/records/NAME.json from a finished run or sweep folder")
    rec.add_argument("folder", help="a run folder (metrics.json) or a sweep's (summary.json)")
    rec.add_argument("--as", dest="name", required=True, help="the record's name, as tables name it")
    rec.add_argument("--commit", help="the commit that made it (default: HEAD of the checkout holding it)")
    rec.add_argument("--about", help="a few words saying what it is, shown under each table using it")
    rec.add_argument("--test", help="a sweep's extra test set (its also_test name) instead of its test split")
    rec.set_defaults(func=cmd_report)
    tab = rep.add_parser("tables", help="rewrite the README's and docs' tables (<!-- table: NAME -->) from records")
    tab.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 naming each table that differs")
    tab.add_argument("--root", default=".", help="the checkout (default: here)")
    tab.set_defaults(func=cmd_report)
    parser.description = (
        "AuTAgent: learn when and which acoustic tools to call for an audio question (a tool-selection policy "
        f"trained with GRPO, exported as a plugin). Commands: {', '.join(sub.choices)}. Each has --help."
    )
    return parser


USER_ERRORS = (
    ("autagent.config", "ConfigError"),
    ("autagent.data.loaders", "DatasetError"),
    ("autagent.oneoff", "UsageError"),
    ("autagent.plugin.trust", "PluginError"),
    ("autagent.policies.router.crossval", "CrossValidationError"),
    ("autagent.reasoners.base", "ReasonerFailing"),
    ("tools.audio", "AudioError"),
    ("tools.registry", "ToolRegistryError"),
)
"""The errors a user causes, by module: looked up only in the modules a command imported, so a command
that fails on its input (a missing clip) has imported nothing heavy (torch, Ray) by then."""


def _user_error(err: BaseException) -> bool:
    classes = [getattr(sys.modules[module], name) for module, name in USER_ERRORS if module in sys.modules]
    return isinstance(err, (*classes, FileExistsError, FileNotFoundError))


def main(argv: list[str] | None = None) -> int:
    _quiet_environment()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("autagent: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if _user_error(err):
            print(f"autagent: error: {err}", file=sys.stderr)
            return 2
        if isinstance(err, OSError):  # a full disk, a permission: say what and where, keep what was written
            print(f"autagent: error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())

"""``autagent`` command line: tools, data, train, eval, select, answer."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _quiet_environment() -> None:
    for key, value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                       "WANDB_MODE": "offline", "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}.items():
        os.environ.setdefault(key, value)
    import warnings

    warnings.filterwarnings("ignore", message="pkg_resources is deprecated")


def _overrides(pairs: list[str] | None) -> dict:
    import yaml

    result = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SystemExit(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        result[key] = yaml.safe_load(value)
    return result


def _config(args):
    from .config import load_config

    overrides = _overrides(getattr(args, "set", None))
    if getattr(args, "profile", None):
        overrides["tools.profile"] = args.profile
    return load_config(getattr(args, "config", None), overrides)


def cmd_tools_run(args) -> int:
    from tools import parse_tool_list
    from tools.pool import ToolPool

    config = _config(args)
    if args.executor:
        config.tools.executor = args.executor
    if args.no_cache:
        config.tools.cache_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"autagent-nocache-{os.getpid()}")
    pool = ToolPool(config.tools)
    records = pool.run(args.audio, parse_tool_list(args.tools))
    print(json.dumps(list(records.values()), indent=2, ensure_ascii=False))
    return 1 if all("error" in r for r in records.values()) else 0


def cmd_tools_precompute(args) -> int:
    from autagent.data import load_dataset
    from tools import parse_tool_list
    from tools.pool import ToolPool

    config = _config(args)
    samples = load_dataset(args.manifest, args.format)
    pool = ToolPool(config.tools)
    paths = sorted({s.audio for s in samples})
    results = pool.run_many(paths, parse_tool_list(args.tools), progress=True)
    errors = [(p, r["tool"], r["error"]) for p, rs in zip(paths, results) for r in rs.values() if "error" in r]
    for path, tool, error in errors[:20]:
        print(f"error: {tool}: {error}", file=sys.stderr)
    print(json.dumps({"clips": len(paths), "computed": pool.computed, "cache_hits": pool.cache.hits, "errors": len(errors),
                      "cache_dir": config.tools.cache_dir}))
    return 0


def cmd_data_generate(args) -> int:
    from autagent.data.embedded import generate

    config = _config(args)
    if args.root:
        config.data.benchmark.root = args.root
    print(json.dumps({k: str(v) for k, v in generate(config.data.benchmark).items()}))
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
    from .pipeline import run_train

    config = _config(args)
    relaunch = accelerate_command(config, args.argv)
    if relaunch is not None:
        import subprocess

        print("launching:", " ".join(relaunch), flush=True)
        return subprocess.call(relaunch, env={**os.environ, "ACCELERATE_LAUNCHED": "1"})
    metrics = run_train(config, resume=args.resume)
    if metrics is not None:
        _print_summary(metrics)
    return 0


def cmd_eval(args) -> int:
    from .pipeline import run_eval

    config = _config(args)
    if args.dataset:
        config.data.test = args.dataset
    if args.reasoner:
        target = config.eval_reasoner or config.reasoner
        target.kind = args.reasoner
    out = args.out or str(config.run_dir / "eval")
    metrics = run_eval(config, out, args.plugin, log_to_wandb=True)
    _print_summary(metrics)
    print(f"wrote {out}/metrics.json, report.md, predictions.jsonl")
    return 0


def _print_summary(metrics: dict) -> None:
    from .report import label

    print(f"{metrics['dataset']} | {metrics['reasoner']} | n = {metrics['n']}")
    for name, m in metrics["methods"].items():
        print(f"  {label(name):28s} acc {100 * m['accuracy']:5.1f}   avg tools {m['avg_tools']:.2f}")


def cmd_select(args) -> int:
    from .plugin import load

    plugin = load(args.plugin, tools_profile=args.profile)
    reply = {"tools": plugin.select(args.audio, args.question)}
    if hasattr(plugin, "probabilities"):  # the router has per-tool probabilities; the LM writes a list
        reply["probabilities"] = plugin.probabilities(args.audio, args.question)
    print(json.dumps(reply))
    return 0


def cmd_answer(args) -> int:
    from tools.pool import ToolPool

    from .data.sample import Sample
    from .plugin import load
    from .reasoners import build_reasoner

    config = _config(args)
    config.reasoner.kind = args.reasoner
    plugin = load(args.plugin, tools_profile=config.tools.profile, tool_settings=config.tools.settings)
    sample = Sample(id="cli", audio=str(Path(args.audio).resolve()), question=args.question,
                    choices=tuple(args.choices), answer=args.choices[0])
    tools = plugin.select(sample.audio, sample.question)
    records = list(ToolPool(config.tools).run(sample.audio, tools).values()) if tools else None
    reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
    reply = reasoner.answer(sample, records)
    reasoner.close()
    print(json.dumps({"tools": tools, "records": records or [], "answer": reply}, ensure_ascii=False))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autagent", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p):
        p.add_argument("--config", help="experiment YAML (default: the embedded defaults)")
        p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field, e.g. grpo.steps=50")
        return p

    tools = sub.add_parser("tools", help="run the acoustic tools").add_subparsers(dest="tools_command", required=True)
    run = with_config(tools.add_parser("run", help="print the JSON records of tools on one clip"))
    run.add_argument("audio")
    run.add_argument("--tools", help="comma-separated tool ids (default: all)")
    run.add_argument("--profile", choices=["embedded", "cluster"])
    run.add_argument("--executor", choices=["ray", "local"])
    run.add_argument("--no-cache", action="store_true", help="compute afresh (a private cache for this call)")
    run.set_defaults(func=cmd_tools_run)
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

    train = with_config(sub.add_parser("train", help="the main job: train, evaluate, export the plugin"))
    train.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    train.set_defaults(func=cmd_train)

    ev = with_config(sub.add_parser("eval", help="every baseline (and a plugin's policy) on a dataset"))
    ev.add_argument("--out", help="output directory (default runs/<name>/eval)")
    ev.add_argument("--dataset", help="an MMAU/MMAR/AVQA file to evaluate on")
    ev.add_argument("--reasoner", choices=["embedded", "qwen2-audio", "openai"])
    ev.add_argument("--plugin", help="a trained plugin directory")
    ev.set_defaults(func=cmd_eval)

    sel = sub.add_parser("select", help="a plugin's tool choice for one clip and question (JSON)")
    sel.add_argument("--plugin", required=True)
    sel.add_argument("--audio", required=True)
    sel.add_argument("--question", required=True)
    sel.add_argument("--profile", choices=["embedded", "cluster"])
    sel.set_defaults(func=cmd_select)

    ans = with_config(sub.add_parser("answer", help="select tools with a plugin, run them, ask a reasoner"))
    ans.add_argument("--plugin", required=True)
    ans.add_argument("--reasoner", default="embedded", choices=["embedded", "qwen2-audio", "openai"])
    ans.add_argument("--audio", required=True)
    ans.add_argument("--question", required=True)
    ans.add_argument("--choices", nargs="+", required=True)
    ans.add_argument("--profile", choices=["embedded", "cluster"])
    ans.set_defaults(func=cmd_answer)
    return parser


def main(argv: list[str] | None = None) -> int:
    _quiet_environment()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    from .config import ConfigError
    from .data.loaders import DatasetError
    from .plugin import PluginError

    try:
        return args.func(args)
    except (ConfigError, DatasetError, PluginError, FileExistsError, FileNotFoundError) as err:
        print(f"autagent: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""The reasoner asking for tools itself (Audio-Maestro's loop) beside the learned selection: accuracy on
the embedded test split, tool F1 on the transfer set, tools, calls, rounds and seconds per query.

Rows, every one through the same loop (:mod:`autagent.reasoners.tool_loop`) so that their seconds compare:
No-Tool and Tools-with-Descriptions (one request, their records in front), ``agentic_only`` (nothing
selected, every tool offered), AuTAgent (each plugin's records in front, one request) and AuTAgent +
agentic (its records in front, the other tools offered).  The caller is ``eval.agentic.caller``:
with the embedded reasoner, the scripted caller written in the open (a stand-in for a real LALM:
:mod:`autagent.reasoners.scripted`); with ``--set reasoner.kind=openai`` a real endpoint decides.
Plugin rows are mean ± std over the plugins given (one per training seed).  Seconds are per query,
selection included, with every whole-clip tool record already in the cache.  docs/results/headline.md, "The
reasoner asks for tools itself", quotes::

    .venv/bin/python scripts/agentic_comparison.py runs/embedded_main{,_s1,_s2}/plugin
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def measure(run, samples, records, subsets, select_seconds, tool_ids, cost, labelled=None, optional=()) -> dict:
    """One row on one dataset: accuracy (or, on the transfer set, tool F1) and the loop's figures;
    ``cost``: each tool's seconds per clip on an empty cache."""
    from autagent.evaluation.selection_check import score
    from rewards.scoring import is_correct

    items = run.run(samples, records, subsets, tool_ids)
    n = len(items)
    row = {
        "tools": sum(len(i.tools) for i in items) / n,
        "calls": sum(len(i.calls) for i in items) / n,
        "rounds": sum(i.rounds for i in items) / n,
        "seconds": sum(i.seconds for i in items) / n + select_seconds,
        "tool_seconds": sum(cost[t] for i in items for t in i.tools) / n,
        "errors": sum(i.error is not None for i in items),
    }
    if labelled is None:
        row["correct"] = [is_correct(s, i.prediction) for s, i in zip(samples, items)]
        row["accuracy"] = sum(row["correct"]) / n
    else:
        quality = score(labelled, [i.tools for i in items], optional)
        row |= {k: quality[k] for k in ("precision", "recall", "f1")}
    return row


def timed(select, samples) -> tuple[list, float]:
    """Each sample's selection, and the seconds one selection takes on average."""
    started = time.perf_counter()
    subsets = [tuple(select(s)) for s in samples]
    return subsets, (time.perf_counter() - started) / max(len(samples), 1)


def tool_costs(config, clips: list[str]) -> dict[str, float]:
    """Each tool's seconds per clip computed from nothing (a private empty cache, in this process)."""
    import tempfile

    from tools.pool import ToolPool

    costs = {}
    with tempfile.TemporaryDirectory() as empty:
        pool = ToolPool(dataclasses.replace(config.tools, cache_dir=empty))
        pool.run_many(clips[:1])  # models loaded, kernels compiled: not counted
        for tool in config.tools.tool_ids:
            started = time.perf_counter()
            pool.run_many(clips[1:], [tool])
            costs[tool] = (time.perf_counter() - started) / max(len(clips) - 1, 1)
    return costs


def spread(values: list[float]) -> tuple[float, float]:
    import numpy as np

    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def table(rows: dict) -> str:
    def cell(values, scale=1.0, digits=1):
        mean, std = spread([scale * v for v in values])
        return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if len(values) > 1 else "")

    lines = [
        "| method | seeds | test accuracy (%) | tools per query | calls per query | rounds | s per query "
        "| tool s per query (cold) | transfer tool F1 | transfer tools per query | transfer rounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in rows.items():
        test, transfer = [r["test"] for r in runs], [r["transfer"] for r in runs]
        lines.append(
            f"| {name} | {len(runs)} | {cell([t['accuracy'] for t in test], 100)} "
            f"| {cell([t['tools'] for t in test], digits=2)} | {cell([t['calls'] for t in test], digits=2)} "
            f"| {cell([t['rounds'] for t in test], digits=2)} | {cell([t['seconds'] for t in test], digits=3)} "
            f"| {cell([t['tool_seconds'] for t in test], digits=2)} "
            f"| {cell([t['f1'] for t in transfer], digits=3)} | {cell([t['tools'] for t in transfer], digits=2)} "
            f"| {cell([t['rounds'] for t in transfer], digits=2)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plugins", nargs="+", help="router plugin directories, one per training seed")
    parser.add_argument("--config", default="experiments/embedded_main.yaml", help="the plugins' experiment")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field")
    parser.add_argument("--queries", default="experiments/transfer/questions.jsonl", help="the transfer set")
    parser.add_argument("--optional", default="sound_events", help="tools optional in the transfer check")
    parser.add_argument("--audio-dir", default=".cache/stand-in-audio", help="the transfer set's stand-in clips")
    parser.add_argument("--cold-clips", type=int, default=21, help="test clips timing each tool from nothing")
    parser.add_argument("--out", help="write every figure as JSON here")
    args = parser.parse_args(argv)

    from autagent.api import load, run_tools
    from autagent.cli import overrides
    from autagent.config import load_config
    from autagent.data.labelled import load_labelled
    from autagent.plugin.manifest import read_manifest
    from autagent.policies.baselines import DescriptionSelector
    from autagent.reasoners import build_reasoner
    from autagent.reasoners.base import CachedReasoner
    from autagent.reasoners.tool_loop import AgenticRun, build_caller
    from autagent.recipes.run import load_splits, tool_records

    config = load_config(args.config, overrides(args.set))
    config.tools.executor = "local"  # records come from the tool cache
    config.tools, _ = run_tools(config.tools, read_manifest(args.plugins[0]))
    tool_ids = config.tools.tool_ids
    test = load_splits(config, need_train=False).test
    labelled = load_labelled(args.queries, args.audio_dir)
    transfer = [item.sample for item in labelled]
    records = {"test": tool_records(config, test), "transfer": tool_records(config, transfer)}
    samples = {"test": test, "transfer": transfer}
    reasoner = build_reasoner(config.reasoner, None, config.tools.max_seconds)
    rounds = config.eval.agentic.max_rounds
    concurrency = config.reasoner.openai.max_concurrency if config.reasoner.kind == "openai" else 1
    optional = tuple(t for t in args.optional.split(",") if t)

    cost = tool_costs(config, sorted({s.audio for s in test})[: args.cold_clips])
    print(f"tool seconds per clip, from nothing: {json.dumps({k: round(v, 3) for k, v in cost.items()})}")

    def both(max_rounds: int, select) -> dict:
        """One row on both datasets.  Each row's reasoner answers afresh (no answer cache: its seconds are
        the reasoner's work); what it learnt of the clips and texts (heard once, encoded once) is shared,
        as in a running service."""
        out = {}
        for name in ("test", "transfer"):
            fresh = CachedReasoner(reasoner.inner, None)
            run = AgenticRun(build_caller(config.eval.agentic, config.reasoner, fresh), max_rounds, None, concurrency)
            subsets, seconds = timed(select, samples[name])
            extra = {"labelled": labelled, "optional": optional} if name == "transfer" else {}
            out[name] = measure(run, samples[name], records[name], subsets, seconds, tool_ids, cost, **extra)
        return out

    for warm in ((), tool_ids):  # not reported: every clip heard, every question and record read once
        both(0, lambda s, warm=warm: warm)

    describe = DescriptionSelector(tool_ids, config.eval.desc_margin, config.eval.desc_floor)
    rows = {
        "No-Tool (hearing only)": [both(0, lambda s: ())],
        "Tools-with-Descriptions (one-shot)": [both(0, describe.select)],
        f"agentic_only (the caller asks, up to {rounds} rounds)": [both(rounds, lambda s: ())],
        "AuTAgent (the plugin's records, one request)": [],
        f"AuTAgent + agentic (records in front, the rest offered, up to {rounds} rounds)": [],
    }
    names = list(rows)
    try:
        for plugin_dir in args.plugins:
            for row, max_rounds in ((names[3], 0), (names[4], rounds)):
                # loaded afresh for each row: every clip's features are computed, as for a new request
                plugin = load(plugin_dir, tools_profile=config.tools.profile, tool_settings=config.tools.settings)
                select = lambda sample, plugin=plugin: plugin.select(sample.audio, sample.question, sample.choices)  # noqa: E731
                rows[row].append(both(max_rounds, select))
            print(f"{plugin_dir}: done", file=sys.stderr, flush=True)
    finally:
        reasoner.close()
    caller = build_caller(config.eval.agentic, config.reasoner, reasoner)
    print(f"caller: {caller.name}; test n = {len(test)}, transfer n = {len(transfer)}; plugins: {args.plugins}")
    print(table(rows))
    for seed, (alone, beside) in enumerate(zip(rows[names[3]], rows[names[4]])):
        pairs = list(zip(alone["test"]["correct"], beside["test"]["correct"]))
        better, worse = sum(b and not a for a, b in pairs), sum(a and not b for a, b in pairs)
        print(f"plugin {seed}: AuTAgent + agentic against AuTAgent on test: {better} improved, {worse} degraded")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"plugins": args.plugins, "caller": caller.name, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

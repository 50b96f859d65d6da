#!/usr/bin/env python
"""Training-cost benchmark (prints figures; not a test).

For one GRPO run on the embedded benchmark it prints the reasoner calls and tool executions made
against what Algorithm 1 done naively would make (B·(G+1) reasoner calls and B·G·|z| tool runs
per step), and the router's median selection latency per query (features + network, with the
clip's audio features computed and without).

Usage: .venv/bin/python bench/training.py [--config experiments/embedded_main.yaml] [--steps N]
       .venv/bin/python bench/training.py --plugin runs/embedded_main/plugin   # a finished plugin's selection only
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default="experiments/embedded_main.yaml")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--plugin", help="time this plugin's selection on the config's test split; train nothing")
    args = parser.parse_args()

    import torch

    from autagent.api import load
    from autagent.config import load_config
    from autagent.recipes.train import run_train

    torch.set_num_threads(1)
    overrides = {
        "name": "bench_train",
        "output_dir": tempfile.mkdtemp(prefix="autagent-bench-"),
        "answer_cache_dir": tempfile.mkdtemp(prefix="autagent-answers-"),
        "logging.wandb": False,
        "logging.progress": False,
        "eval.methods": ["no_tool", "policy"],
    }
    if args.steps:
        overrides["grpo.steps"] = args.steps
    config = load_config(args.config, overrides)
    if args.plugin:
        return time_selection(config, load(args.plugin))
    started = time.perf_counter()
    metrics = run_train(config)
    elapsed = time.perf_counter() - started
    t = metrics["training"]
    print(
        f"GRPO run: {t['steps']} steps, B = {config.grpo.batch_size}, G = {config.grpo.group_size}, "
        f"{elapsed:.0f} s in all"
    )
    print(
        f"reasoner calls: {t['reasoner_calls']} made vs {t['naive_reasoner_calls']} naive "
        f"({t['naive_reasoner_calls'] / max(t['reasoner_calls'], 1):.1f}x fewer; fresh answer cache)"
    )
    from autagent.recipes.run import load_splits

    splits = load_splits(config)
    once = len({x.audio for x in splits.train + splits.dev + splits.test}) * len(config.tools.tool_ids)
    made = t["tool_runs"] or once
    print(
        f"tool executions: {t['tool_runs']} made in this run ({'cache warm; ' if not t['tool_runs'] else ''}"
        f"a cold run makes "
        f"one per (clip, tool), {once} for train+dev+test) vs {t['naive_tool_runs']} naive for the training steps "
        f"alone ({t['naive_tool_runs'] / made:.1f}x fewer)"
    )
    time_selection(config, load(config.run_dir / "plugin"))


def time_selection(config, plugin) -> None:
    """Median selection latency of ``plugin`` over 50 test queries, the clip's features computed and memoised;
    a plugin with a back-off is also timed without it, query by query in the same run (their ratio). With the
    features memoised it prints the process's CPU time too: on a machine other jobs share, wall-clock
    milliseconds move with their load, CPU time much less."""
    from autagent.recipes.run import load_splits

    samples = load_splits(config).test[:50]
    plugin.select_many(samples[:2])  # warm the encoders
    backoff = getattr(plugin, "backoff", None)
    cold, warm, bare = [], [], []

    def timed(sample) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        plugin.select(sample.audio, sample.question, sample.choices)
        return time.perf_counter() - wall, time.process_time() - cpu

    for sample in samples:
        plugin.featurizer.audio._memo.clear()
        cold.append(timed(sample)[0])
        warm.append(timed(sample))
        if backoff is not None:
            plugin.backoff = None
            bare.append(timed(sample))
            plugin.backoff = backoff

    def ms(times, k: int) -> float:
        return 1000 * statistics.median(t[k] for t in times)

    print(
        f"router selection latency per query ({len(samples)} queries, medians): {1000 * statistics.median(cold):.1f} "
        f"ms with audio encoding; with the clip's features memoised {ms(warm, 0):.2f} ms ({ms(warm, 1):.2f} ms CPU)"
    )
    if bare:
        print(
            f"the same plugin without its back-off: {ms(bare, 0):.2f} ms ({ms(bare, 1):.2f} ms CPU); with it "
            f"{ms(warm, 0) / ms(bare, 0):.2f}x ({ms(warm, 1) / ms(bare, 1):.2f}x CPU)"
        )


if __name__ == "__main__":
    main()

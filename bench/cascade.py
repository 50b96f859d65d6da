#!/usr/bin/env python
"""Cascade reasoner speed (prints figures; not a test).

Gemma 3 270M from the converted cache (``reasoner.cascade.cache_dir``), one thread, on test-split
queries with four choices and the records of random tool subsets (0 to 7 tools), asked the way
training asks: one query's ``--subsets`` subsets in one call.  It prints the load time and the median
seconds per answer of

* the cascade as built (one token tree per pass: record lines shared, choices on their prompt,
  logits only where a choice token is predicted; bfloat16 and float32), and
* the unoptimised way, for the ratio: each (prompt, choice) its own forward pass with the full
  262k-token projection at every position (what ``model(ids).logits`` computes).

A fresh answer cache is not involved: these are the model's own seconds.

Usage: .venv/bin/python bench/cascade.py [--config experiments/cascade_main.yaml] [--queries 12]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def workload(config, queries: int, subsets: int, seed: int = 0):
    """``queries`` lists of ``subsets`` (sample, records) requests: four-choice test questions."""
    from autagent.pipeline import load_splits, tool_records

    config.tools.executor = "local"
    splits = load_splits(config, need_train=False)
    rng = random.Random(seed)
    items = [s for s in splits.test if len(s.choices) == 4]
    items = rng.sample(items, min(queries, len(items)))
    records = tool_records(config, items)
    tools = list(config.tools.tool_ids)
    out = []
    for sample in items:
        group = []
        for _ in range(subsets):
            chosen = rng.sample(tools, rng.randint(0, len(tools)))
            group.append((sample, [records[sample.id][t] for t in chosen] or None))
        out.append(group)
    return out


def naive_seconds(reasoner, requests) -> float:
    """Seconds for the requests scored the unoptimised way (full logits at every position, a forward
    pass per choice, no shared prefix, no calibration)."""
    import torch

    started = time.perf_counter()
    for sample, records in requests:
        laid = reasoner.lay_out(sample, records)
        context = [t for _, ids in laid.prompt.pieces for t in ids]
        for ids in laid.prompt.choices:
            with torch.inference_mode():
                torch.log_softmax(reasoner.model(torch.tensor([context + ids])).logits.float(), -1)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default="experiments/cascade_main.yaml")
    parser.add_argument("--queries", type=int, default=12)
    parser.add_argument("--subsets", type=int, default=6, help="subsets per query, asked in one call")
    parser.add_argument("--naive-queries", type=int, default=3)
    parser.add_argument("--pack-tokens", type=int, nargs="*", help="max_pack_tokens to compare (bfloat16)")
    args = parser.parse_args()

    import dataclasses

    import torch

    from autagent.config import load_config
    from autagent.reasoners.cascade import CascadeReasoner

    torch.set_num_threads(1)
    started = time.perf_counter()
    import transformers.models.gemma3.modeling_gemma3  # noqa: F401  (imported once per process, timed apart)

    import_s = time.perf_counter() - started
    config = load_config(args.config, {"logging.progress": False})
    groups = workload(config, args.queries, args.subsets)
    tools = [len(r or []) for g in groups for _, r in g]
    print(
        f"cascade bench: {len(groups)} test queries x {args.subsets} subsets (4 choices; 0-7 tools, median "
        f"{statistics.median(tools):.0f}), 1 thread, {os.cpu_count()} cores; importing transformers' Gemma 3 "
        f"took {import_s:.1f} s"
    )
    base = config.reasoner.cascade
    settings = [("bfloat16", n) for n in args.pack_tokens or [base.max_pack_tokens]]
    for dtype, pack_tokens in settings + [("float32", base.max_pack_tokens)]:
        started = time.perf_counter()
        reasoner = CascadeReasoner(dataclasses.replace(base, dtype=dtype, max_pack_tokens=pack_tokens))
        load_s = time.perf_counter() - started
        reasoner.answer_many(groups[0][:1])  # warm up
        per_answer, one_by_one = [], []
        for group in groups:
            t0 = time.perf_counter()
            reasoner.answer_many(group)
            per_answer.append((time.perf_counter() - t0) / len(group))
        for group in groups[: max(2, len(groups) // 3)]:
            t0 = time.perf_counter()
            reasoner.answer_many(group[:1])
            one_by_one.append(time.perf_counter() - t0)
        median = statistics.median(per_answer)
        print(
            f"  transformers {dtype}, {pack_tokens} tokens a pass: load {load_s:.1f} s; median {median:.3f} s per "
            "answer with a query's "
            f"subsets in one call (target <= 0.25), {statistics.median(one_by_one):.3f} s asked one at a time"
        )
        if (dtype, pack_tokens) == settings[0]:
            naive = [r for g in groups[: args.naive_queries] for r in g[:2]]
            naive_s = naive_seconds(reasoner, naive) / len(naive)
            print(
                f"  unoptimised ({dtype}, full logits at every position, a pass per choice): {naive_s:.3f} s per "
                f"answer ({naive_s / median:.1f}x the cascade's)"
            )
        del reasoner
    print("  llama.cpp (llama-cpp-python): not measured; see docs/results.md, 'The cascade reasoner'")


if __name__ == "__main__":
    main()

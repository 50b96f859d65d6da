#!/usr/bin/env python
"""Cascade reasoner speed (prints figures; not a test).

Gemma 3 270M from the converted cache (``reasoner.cascade.cache_dir``), one thread, on test-split
queries with four choices and the records of random tool subsets (0 to 7 tools), asked the way
training asks: one query's ``--subsets`` subsets in one call.  It prints the load time and the median
seconds per answer of

* the cascade as built against its scoring as it was at ``--before`` (a commit; its
  ``scoring.py`` read with ``git show``), the two asked in turn on each query in one run: the ratio,
  and on how many items the answer (the calibrated argmax) is the same;
* the cascade asked one subset at a time, in float32, and with passes of other sizes;
* the unoptimised way, for the ratio: each (prompt, choice) its own forward pass with the full
  262k-token projection at every position (what ``model(ids).logits`` computes).

A fresh answer cache is not involved: these are the model's own seconds (each call computes the
calibration of its choices, as a query's first call does).

Usage: .venv/bin/python bench/cascade.py [--config experiments/cascade_main.yaml] [--queries 12]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BEFORE = "4d19cae"
"""The scoring before issue 45 (one dense masked attention over a pass, the logits of every predicting row)."""
SCORING = "autagent/reasoners/cascade/scoring.py"


def workload(config, queries: int, subsets: int, seed: int = 0):
    """``queries`` lists of ``subsets`` (sample, records) requests: four-choice test questions."""
    from autagent.recipes.run import load_splits, tool_records

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


def scoring_at(ref: str):
    """``score_prompts(model, prompts, max_tokens, block)`` of the scoring module at commit ``ref``
    (None when git or the commit is not there)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{ref}:{SCORING}"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType(f"scoring_{ref}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{ref}:{SCORING}", "exec"), module.__dict__)
    return lambda model, prompts, max_tokens, block: module.score_prompts(model, prompts, max_tokens)


def timed(reasoner, group, score=None) -> tuple[float, list[int]]:
    """Seconds per answer for one call, calibration included, and each request's argmax."""
    import autagent.reasoners.cascade as cascade

    built = cascade.score_prompts
    cascade.score_prompts = score or built
    reasoner.calibration.neutral.clear()  # every variant computes its calibration, as a query's first call does
    try:
        started = time.perf_counter()
        rows = reasoner.choice_scores(group)
        seconds = (time.perf_counter() - started) / len(group)
    finally:
        cascade.score_prompts = built
    return seconds, [max(range(len(row)), key=row.__getitem__) for row, _ in rows]


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


def before_and_after(reasoner, groups, ref: str) -> float:
    """The cascade as built against its scoring at ``ref``, in turn on each query; its median."""
    before = scoring_at(ref)
    after_s, before_s, same, differ = [], [], 0, []
    for group in groups:
        seconds, answers = timed(reasoner, group)
        after_s.append(seconds)
        if before is None:
            continue
        seconds, old = timed(reasoner, group, before)
        before_s.append(seconds)
        same += sum(a == b for a, b in zip(answers, old))
        differ += [f"{group[i][0].id} subset {i}" for i, (a, b) in enumerate(zip(answers, old)) if a != b]
    median = statistics.median(after_s)
    print(
        f"  the cascade as built: median {median:.3f} s per answer with a query's subsets in one call (target <= 0.1)"
    )
    if before is None:
        print(f"  before ({ref}): not measured ({ref} is not in this clone)")
        return median
    old = statistics.median(before_s)
    print(
        f"  before (the scoring at {ref}, one dense mask a pass): median {old:.3f} s per answer: {old / median:.2f}x "
        f"the time; the same answer on {same} of {same + len(differ)} items"
        + (f" (differ: {differ})" if differ else "")
    )
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default="experiments/cascade_main.yaml")
    parser.add_argument("--queries", type=int, default=12)
    parser.add_argument("--subsets", type=int, default=6, help="subsets per query, asked in one call")
    parser.add_argument("--naive-queries", type=int, default=3)
    parser.add_argument("--before", default=BEFORE, help="the commit whose scoring is compared")
    parser.add_argument("--pack-tokens", type=int, nargs="*", default=[], help="other max_pack_tokens to time")
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
    settings = [("bfloat16", base.max_pack_tokens)] + [("bfloat16", n) for n in args.pack_tokens]
    for dtype, pack_tokens in settings + [("float32", base.max_pack_tokens)]:
        started = time.perf_counter()
        reasoner = CascadeReasoner(dataclasses.replace(base, dtype=dtype, max_pack_tokens=pack_tokens))
        print(f"  transformers {dtype}, {pack_tokens} tokens a pass: load {time.perf_counter() - started:.1f} s")
        reasoner.answer_many(groups[0][:1])  # warm up
        if (dtype, pack_tokens) == settings[0]:
            median = before_and_after(reasoner, groups, args.before)
            one = [timed(reasoner, group[:1])[0] for group in groups[: max(2, len(groups) // 3)]]
            print(f"  asked one subset at a time: median {statistics.median(one):.3f} s per answer")
            naive = [r for g in groups[: args.naive_queries] for r in g[:2]]
            naive_s = naive_seconds(reasoner, naive) / len(naive)
            print(
                f"  unoptimised ({dtype}, full logits at every position, a pass per choice): {naive_s:.3f} s per "
                f"answer ({naive_s / median:.1f}x the cascade's)"
            )
        else:
            median = statistics.median(timed(reasoner, group)[0] for group in groups)
            print(f"    median {median:.3f} s per answer with a query's subsets in one call")
        del reasoner
    print(
        "  llama.cpp: not in the loop (the prebuilt ik-llama-cpp-python, AVX2, took 1.6x the cascade's time on "
        "the same passes; see docs/results/cascade.md)"
    )


if __name__ == "__main__":
    main()

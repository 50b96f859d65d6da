#!/usr/bin/env python
"""The cascade in bfloat16 against float32 on the answer table's calls (prints figures; not a test).

A training query's 16 designed subsets (no tool, each alone, all seven, all but each one) asked in one call,
as ``autagent adapt`` fills its table, for ``--queries`` training queries of ``experiments/cascade_adapt.yaml``
(from the 11th of the table's fixed order: not the first ones the table asks), one thread: seconds per answer
in each dtype and on how many of the answers the two agree. Why: bfloat16 was chosen on a CPU with AVX-512
BF16 and AMX, where its matmuls ran at about twice float32's; on one with AVX2 alone (``torch.backends.cpu.
get_cpu_capability()``), bfloat16 matmuls are emulated and run several times slower than float32's.

Usage: .venv/bin/python scripts/cascade_dtype_check.py [--queries 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=3)
    parser.add_argument("--config", default="experiments/cascade_adapt.yaml")
    args = parser.parse_args()

    import torch

    from autagent.config import load_config
    from autagent.policies.router.table import designed_subsets, query_order
    from autagent.reasoners.cascade import CascadeReasoner
    from autagent.recipes.run import load_splits, tool_records

    torch.set_num_threads(1)
    config = load_config(args.config, {"logging.progress": False, "tools.executor": "local"})
    train = load_splits(config).train
    chosen = set(query_order([s.id for s in train], 0)[10 : 10 + args.queries])
    items = [s for s in train if s.id in chosen]
    records = tool_records(config, items)
    subsets = designed_subsets(config.tools.tool_ids, ["empty", "singles", "all", "leave_one_out"])
    groups = [[(s, [records[s.id][t] for t in sub] or None) for sub in subsets] for s in items]
    print(
        f"cascade dtype check: {len(items)} training queries x {len(subsets)} subsets, 1 thread, "
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}"
    )
    answers = {}
    for dtype in ("float32", "bfloat16"):
        reasoner = CascadeReasoner(dataclasses.replace(config.reasoner.cascade, dtype=dtype))
        started = time.perf_counter()
        answers[dtype] = [a.text for group in groups for a in reasoner.answer_many(group)]
        print(f"  {dtype}: {(time.perf_counter() - started) / sum(map(len, groups)):.2f} s per answer", flush=True)
        del reasoner
    same = sum(a == b for a, b in zip(answers["float32"], answers["bfloat16"]))
    print(f"  the same answer in both: {same} of {len(answers['float32'])}")


if __name__ == "__main__":
    main()

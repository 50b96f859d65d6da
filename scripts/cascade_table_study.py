"""What the cascade reasoner's answers look like over tool subsets, on training queries only: the study
that chose `experiments/cascade_adapt.yaml`'s table design and cross-validation grid.

    .venv/bin/python scripts/cascade_table_study.py --items 120

For the first ``--items`` training queries in the answer table's order: the reasoner's accuracy with no
tool, each tool alone, all seven and all but each one (asked, or served by the answer cache); how often
the table's surrogate gives All-Tools' answer when All-Tools is left out of what it may read; the best
subset of the sixteen per question kind, chosen on the kind's other queries (a lookup's estimate); and
the ceiling of the best subset per query. No test query is read.
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from autagent.config import load_config
from autagent.policies.router.table import AnswerTable, Budget, query_order
from autagent.reasoners import build_reasoner
from autagent.recipes.run import load_splits, tool_records
from rewards.scoring import is_correct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="experiments/cascade_adapt.yaml")
    parser.add_argument("--items", type=int, default=120)
    args = parser.parse_args()
    config = load_config(args.config, {"tools.executor": "local", "logging.progress": False})
    train = load_splits(config).train
    tools = tuple(config.tools.tool_ids)
    order = query_order((s.id for s in train), config.policy.router.table.order_seed)[: args.items]
    by_id = {s.id: s for s in train}
    samples = [by_id[i] for i in order]
    records = tool_records(config, samples)
    reasoner = build_reasoner(config.reasoner, config.answer_cache_dir)
    design = ["empty", "singles", "all", "leave_one_out"]
    order_seed = config.policy.router.table.order_seed
    table = AnswerTable(samples, tools, design).fill(reasoner, records, Budget(None), order_seed)
    items = table.items
    print(f"{len(items)} training queries, {reasoner.calls} new answers (the rest from the answer cache)")

    def right(sid, subset) -> bool:
        return is_correct(by_id[sid], table.answers[sid][subset][0])

    def accuracy(subset) -> float:
        return float(np.mean([right(i, subset) for i in items]))

    print(f"  no tool {100 * accuracy(()):.1f} %, all seven {100 * accuracy(tools):.1f} %")
    for t in tools:
        rest = tuple(x for x in tools if x != t)
        print(f"  {t:13s} alone {100 * accuracy((t,)):5.1f} %   all but it {100 * accuracy(rest):5.1f} %")
    agree = np.mean([table.surrogate(i, tools, exclude=tools) == table.answers[i][tools][0] for i in items])
    print(f"  the surrogate gives All-Tools' answer without it: {100 * agree:.1f} %")
    kinds = collections.defaultdict(list)
    for i in items:
        kinds[by_id[i].category].append(i)
    chosen = []
    for i in items:
        others = [j for j in kinds[by_id[i].category] if j != i] or items
        best = max(table.design, key=lambda z: (np.mean([right(j, z) for j in others]), z == tools))
        chosen.append(right(i, best))
    print(f"  the best of the 16 per question kind, chosen on its other queries: {100 * np.mean(chosen):.1f} %")
    ceiling = np.mean([any(right(i, z) for z in table.design) for i in items])
    print(f"  the best of the 16 per query (a ceiling): {100 * ceiling:.1f} %")
    reasoner.close()


if __name__ == "__main__":
    main()

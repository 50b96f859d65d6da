"""Re-check, on training items, a choice the cascade reasoner's defaults were first made on test items:
calibrated scoring against the summed log-likelihood (../shared/STACK-NOTES.md measured both on 40
test-split items whose labelled tools reveal the answer: 65 % against 55 %).

    .venv/bin/python scripts/cascade_layout_check.py --items 80

The first ``--items`` training queries in the answer table's order (``table.order_seed``) that have
labelled tools, each answered with no record and with its labelled tools' records, under each scoring;
prints accuracy ± its binomial standard error and how many answers were new (the rest came from the
answer cache, which every run shares).
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import numpy as np

from autagent.config import load_config
from autagent.policies.router.table import query_order
from autagent.reasoners import build_reasoner
from autagent.reasoners.base import ask_with_records
from autagent.recipes.run import load_splits, tool_records
from rewards.scoring import is_correct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="experiments/cascade_adapt.yaml")
    parser.add_argument("--items", type=int, default=80)
    args = parser.parse_args()
    config = load_config(args.config, {"tools.executor": "local", "logging.progress": False})
    train = load_splits(config).train
    order = query_order((s.id for s in train), config.policy.router.table.order_seed)
    by_id = {s.id: s for s in train}
    items = [by_id[i] for i in order if by_id[i].meta.get("tools")][: args.items]
    records = tool_records(config, items)
    print(f"{len(items)} training queries with labelled tools (the table's order), the cascade reasoner:")
    for calibrate in (True, False):
        cascade = dataclasses.replace(config.reasoner.cascade, calibrate=calibrate)
        reasoner = build_reasoner(dataclasses.replace(config.reasoner, cascade=cascade), config.answer_cache_dir)
        for shown in ("no record", "labelled tools"):
            subsets = [() if shown == "no record" else tuple(s.meta["tools"]) for s in items]
            replies = ask_with_records(reasoner, items, records, subsets)
            right = np.mean([is_correct(s, r.text) for s, r in zip(items, replies)])
            error = math.sqrt(right * (1 - right) / len(items))
            scoring = "calibrated" if calibrate else "summed log-likelihood"
            print(f"  {scoring:22s} {shown:15s} {100 * right:5.1f} ± {100 * error:.1f} %")
        print(f"  ({reasoner.calls} new answers for this scoring)")
        reasoner.close()


if __name__ == "__main__":
    main()

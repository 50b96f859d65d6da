"""Issue 36's figures over seeds: the transfer check and the test split, today's router against its
back-off copies (``autagent plugin backoff``) and Tools-with-Descriptions.

    .venv/bin/python scripts/backoff_summary.py --root runs/backoff --seeds 0 1 2

Reads ``<root>/transfer_s<seed>.json`` (``autagent check-selection --plugin TODAY --plugin VOTE --plugin FILL
--out ...``, in that order) and ``<root>/eval/s<seed>_<name>/`` (``autagent eval --plugin ...``), and
prints markdown: mean ± std over the seeds (the per-seed values after each), per tool too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

NAMES = ("today", "vote", "fill")
KEYS = ("precision", "recall", "f1", "calls_per_item", "empty_on_tool_items", "empty_selections")


def spread(values, scale=100.0, digits=1) -> str:
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    each = ", ".join(f"{scale * v:.{digits}f}" for v in values)
    return f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f} ({each})"


def transfer(root: Path, seeds) -> dict:
    """selector -> reading -> per-seed score dicts (the check's JSON, selectors renamed)."""
    out: dict = {}
    for seed in seeds:
        result = json.loads((root / f"transfer_s{seed}.json").read_text())
        plugins = [name for name in result if name.startswith("plugin ")]
        for name, key in [*zip(NAMES, plugins), ("Tools-with-Descriptions", "Tools-with-Descriptions")]:
            for reading in ("all_labels", "optional_exempt"):
                out.setdefault(name, {}).setdefault(reading, []).append(result[key][reading])
    return out


def policy_rows(folder: Path) -> dict[str, tuple[str, ...]]:
    rows = (json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines())
    return {row["id"]: tuple(row["tools"]) for row in rows if row["method"] == "policy"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="runs/backoff")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args(argv)
    root, seeds = Path(args.root), args.seeds
    checks = transfer(root, seeds)
    for reading, title in (("optional_exempt", "sound_events optional"), ("all_labels", "every label required")):
        print(f"\nTransfer set, {title} (mean ± std over seeds {seeds}; per seed in brackets):\n")
        print("| selector | precision | recall | F1 | calls per item | empty on items needing a tool | empty |")
        print("|---|---|---|---|---|---|---|")
        for name, readings in checks.items():
            runs = readings[reading]
            counts = {"calls_per_item": (1.0, 2), "f1": (1.0, 3)}  # not percentages
            cells = [spread([r[k] for r in runs], *counts.get(k, (100.0, 1))) for k in KEYS]
            print(f"| {name} | {' | '.join(cells)} |")
    print("\nPer tool, sound_events optional: recall (hits / labels), precision (hits / calls), calls:\n")
    tools = sorted({t for runs in checks["today"]["optional_exempt"] for t in runs["per_tool"]})
    print("| tool | labels | " + " | ".join(f"{n} recall | {n} precision | {n} calls" for n in checks) + " |")
    print("|---|---|" + "---|" * 3 * len(checks))
    for tool in tools:
        cells = []
        for readings in checks.values():
            zero = {"called": 0, "needed": 0, "right": 0}
            rows = [run["per_tool"].get(tool, zero) for run in readings["optional_exempt"]]
            recall = [row["right"] / row["needed"] if row["needed"] else 0.0 for row in rows]
            precision = [row["right"] / row["called"] if row["called"] else 0.0 for row in rows]
            cells += [spread(recall, digits=0), spread(precision, digits=0), spread([r["called"] for r in rows], 1, 0)]
        needed = checks["today"]["optional_exempt"][0]["per_tool"].get(tool, {}).get("needed", 0)
        print(f"| {tool} | {needed} | {' | '.join(cells)} |")
    print(f"\nTest split (embedded reasoner, 300 items; mean ± std over seeds {seeds}):\n")
    print("| plugin | accuracy | avg tools | items whose selection differs from today's |")
    print("|---|---|---|---|")
    for name in NAMES:
        accuracy, tools_per_item, changed = [], [], []
        for seed in seeds:
            folder = root / "eval" / f"s{seed}_{name}"
            policy = json.loads((folder / "metrics.json").read_text())["methods"]["policy"]
            accuracy.append(policy["accuracy"])
            tools_per_item.append(policy["avg_tools"])
            ours, today = policy_rows(folder), policy_rows(root / "eval" / f"s{seed}_today")
            changed.append(sum(ours[i] != today[i] for i in today) / len(today))
        print(f"| {name} | {spread(accuracy)} | {spread(tools_per_item, 1.0, 2)} | {spread(changed)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Why a router trained against the cascade reasoner scores below All-Tools: the figures issue 41 asks
for, read from finished runs (no reasoner is asked).

    .venv/bin/python scripts/cascade_diagnosis.py runs/sweeps/cascade/autagent-s{0,1,2}

For each run, then over the runs (mean ± std): the share of test items on which the router calls nothing
and its accuracy there (beside No-Tool's and All-Tools' on the same items); each tool's share of the
sampled subsets at the start, middle and end of training; the share of GRPO's draws that re-asked an
(item, subset) already answered; and what the run's price and start imply: the expected reward of
All-Tools at the price, the expected tools per draw and the chance of drawing all tools at the start.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import yaml


def predictions(run: Path) -> dict[str, dict[str, dict]]:
    """method -> item id -> its prediction row."""
    out: dict[str, dict[str, dict]] = {}
    for line in (run / "predictions.jsonl").read_text().splitlines():
        row = json.loads(line)
        out.setdefault(row["method"], {})[row["id"]] = row
    return out


def silent_items(rows: dict[str, dict[str, dict]]) -> dict:
    """The test items on which the policy calls no tool, and how each method fares on them."""
    silent = [i for i, row in rows["policy"].items() if not row["tools"]]
    n = len(rows["policy"])

    def accuracy(method):
        return statistics.fmean(rows[method][i]["correct"] for i in silent) if silent else float("nan")

    return {
        "share": len(silent) / n,
        "policy": accuracy("policy"),
        "no_tool": accuracy("no_tool"),
        "all_tools": accuracy("all_tools") if "all_tools" in rows else float("nan"),
    }


def tool_shares(run: Path) -> dict[str, dict[str, float]]:
    """Each tool's share of the sampled subsets, averaged over the first, middle and last tenth of steps."""
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines() if line]
    tools = sorted(k.split("/", 1)[1] for k in log[0] if k.startswith("tool_share/"))
    tenth = max(len(log) // 10, 1)
    parts = {"start": log[:tenth], "middle": log[len(log) // 2 - tenth // 2 :][:tenth], "end": log[-tenth:]}
    return {
        when: {t: statistics.fmean(row[f"tool_share/{t}"] for row in rows) for t in tools}
        for when, rows in parts.items()
    }


def repeated_draws(metrics: dict) -> float:
    """The share of GRPO's asks (beyond each query's one no-tool answer) that an earlier ask had answered."""
    training = metrics["training"]
    naive, asked = training["naive_reasoner_calls"], training["reasoner_calls"]
    return 1 - asked / naive if naive else float("nan")


def start(config: dict) -> dict:
    """What the start implies: each tool's probability, the tools per draw, the chance of all tools."""
    tools = len(config["tools"]["enabled"])
    p = 1 / (1 + math.exp(-config["policy"]["router"]["init_bias"]))
    grpo = config["grpo"]
    draws = grpo["steps"] * grpo["batch_size"] * grpo["group_size"]
    return {
        "p_tool": p,
        "tools_per_draw": tools * p,
        "p_no_tool": (1 - p) ** tools,
        "all_tools_draws_expected": draws * p**tools,
        "draws": draws,
    }


def mean_std(values) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "n/a"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {spread:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    rows = []
    for run in args.runs:
        metrics = json.loads((run / "metrics.json").read_text())
        config = yaml.safe_load((run / "config.yaml").read_text())
        row = {
            "run": str(run),
            "accuracy": metrics["methods"]["policy"]["accuracy"],
            "avg_tools": metrics["methods"]["policy"]["avg_tools"],
            "silent": silent_items(predictions(run)),
            "shares": tool_shares(run),
            "repeated": repeated_draws(metrics),
            "price_check": metrics.get("price_check") or {},
            "start": start(config),
        }
        rows.append(row)
        print(json.dumps(row, indent=1))
    print("\nover the runs (mean ± std):")
    print("  policy accuracy", mean_std(r["accuracy"] for r in rows), "tools", mean_std(r["avg_tools"] for r in rows))
    for key in ("share", "policy", "no_tool", "all_tools"):
        print(f"  silent items: {key}", mean_std(r["silent"][key] for r in rows))
    print("  repeated draws", mean_std(r["repeated"] for r in rows))
    for when in ("start", "middle", "end"):
        tools = rows[0]["shares"][when]
        print(f"  tool shares, {when}:", {t: mean_std(r["shares"][when][t] for r in rows) for t in tools})


if __name__ == "__main__":
    main()

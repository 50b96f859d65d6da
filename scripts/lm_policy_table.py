"""The text LM policy's table for docs/results/lm_policy.md, from the runs' predictions: each trained seed and
its zero-shot start beside No-Tool, All-Tools and the router, with paired exact 95 % intervals over the test
items (:func:`autagent.evaluation.paired.paired_difference`) for the differences the goals name.

    python scripts/lm_policy_table.py --trained runs/smollm_lm_s0 runs/smollm_lm_s1 runs/smollm_lm_s2 \\
        --zero-shot runs/smollm_lm_zero_shot --router runs/embedded_main

Every run must have answered the same test items (the embedded benchmark, seed 0: same items, same order).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from autagent.evaluation.paired import paired_difference


def answers(run: Path, method: str, required: bool = True) -> dict:
    """``{item id: (correct, tools)}`` of ``method`` in ``run``'s predictions.jsonl (empty when the run did
    not evaluate it and it is not ``required``)."""
    found = {}
    for line in (Path(run) / "predictions.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["method"] == method:
            found[row["id"]] = (bool(row["correct"]), len(row["tools"]))
    if not found and required:
        raise SystemExit(f"{run}/predictions.jsonl: no rows of method {method!r}")
    return found


def rates(got: dict) -> tuple[float, float]:
    """Accuracy in points and tools per item of ``{item id: (correct, tools)}``."""
    n = len(got)
    return 100 * sum(c for c, _ in got.values()) / n, sum(t for _, t in got.values()) / n


def row(name: str, got: dict) -> str:
    accuracy, tools = rates(got)
    return f"| {name} | {accuracy:.1f} | {tools:.2f} |"


def seed_row(trained: dict) -> str:
    """The trained seeds' mean accuracy and tools, with the seeds' standard deviation."""
    import statistics

    accuracy, tools = zip(*(rates(got) for got in trained.values()))
    mean, spread, calls = statistics.mean(accuracy), statistics.stdev(accuracy), statistics.mean(tools)
    return f"| SmolLM2 + GRPO, mean of {len(trained)} seeds (± sd) | {mean:.1f} ± {spread:.1f} | {calls:.2f} |"


def difference(reference: dict, other: dict) -> str:
    ids = sorted(reference)
    if sorted(other) != ids:
        raise SystemExit("the runs answered different test items")
    d = paired_difference([reference[i][0] for i in ids], [other[i][0] for i in ids])
    low, high = (100 * x for x in d["interval"])
    return f"{100 * d['difference']:+.1f} [{low:+.1f}, {high:+.1f}]"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trained", nargs="+", required=True, type=Path)
    parser.add_argument("--zero-shot", required=True, type=Path)
    parser.add_argument("--router", type=Path)
    args = parser.parse_args(argv)
    zero = answers(args.zero_shot, "policy")
    base = args.trained[0]
    no_tool, all_tools = answers(base, "no_tool"), answers(base, "all_tools")
    asr = answers(base, "single:asr", required=False)  # the constant a trivial policy would match
    router = answers(args.router, "policy") if args.router else None
    trained = {run.name: answers(run, "policy") for run in args.trained}
    print("| Method | Accuracy | Avg tools |\n|---|---|---|")
    print(row("No-Tool", no_tool))
    print(row("All-Tools", all_tools))
    if asr:
        print(row("ASR alone on every item (single:asr)", asr))
    print(row("SmolLM2 zero-shot (steps 0)", zero))
    for name, got in trained.items():
        print(row(f"SmolLM2 + GRPO, {name}", got))
    if len(trained) > 1:
        print(seed_row(trained))
    if router:
        print(row(f"router ({args.router.name})", router))
    print("\n| Trained run | vs zero-shot | vs All-Tools | vs ASR alone | vs router |\n|---|---|---|---|---|")
    for name, got in trained.items():
        versus = [difference(ref, got) if ref else "—" for ref in (zero, all_tools, asr, router)]
        print(f"| {name} | " + " | ".join(versus) + " |")
    print("\n(points; paired exact McNemar 95 % intervals over the test items)")
    print(
        "\n| Run | GRPO steps | s/step | sampling | reward | old+ref logps | loss fwd+bwd | training s | "
        "evaluation s | total s | invalid replies (training) |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for run in (args.zero_shot, *args.trained):
        print(timing(run))


def timing(run: Path) -> str:
    """One row of where ``run``'s time went (metrics.json: ``training.step_seconds``, ``timings.phases``) and how
    many replies sampled in training did not parse (``training.invalid_reasons``)."""
    metrics = json.loads((Path(run) / "metrics.json").read_text())
    training, phases = metrics.get("training") or {}, metrics.get("timings", {}).get("phases", {})
    per = training.get("step_seconds") or {}
    split = [f"{per[k]:.1f}" if k in per else "—" for k in ("step", "generation", "reward")]
    split += [f"{per[k]:.1f}" if k in per else "—" for k in ("reference_and_old_logps", "loss_forward_backward")]
    invalid = sum((training.get("invalid_reasons") or {}).values())
    total = f"{phases['total']:.0f}" if "total" in phases else "—"
    cells = [run.name, str(training.get("steps", 0)), *split]
    cells += [f"{phases.get('training', 0):.0f}", f"{phases.get('evaluation', 0):.0f}", total, str(invalid)]
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    main()

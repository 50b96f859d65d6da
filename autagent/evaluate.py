"""The evaluation harness: every baseline of the paper, for one reasoner and one dataset.

Methods (``metrics.json`` names): ``no_tool``, ``random``, ``all_tools``, ``tools_desc``,
``single:<tool>`` for each tool, ``oracle_single`` (right if any single tool's path is right),
``oracle_subsets`` (right if any of the 64 subsets' paths is right) and ``policy`` (a trained
plugin).  Every reasoner call goes through the answer cache, so methods share answers.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tools import TOOL_IDS

from .data.sample import Sample
from .policies.baselines import DescriptionSelector, RandomSelector, all_subsets
from .scoring import is_correct

Subset = tuple[str, ...]


@dataclass
class MethodResult:
    subsets: list[Subset]
    predictions: list[str | None]
    correct: list[bool]


def ask(reasoner, samples: list[Sample], records: dict[str, dict], subsets: list[Subset | None]) -> list[str | None]:
    """Reasoner replies for each sample with its subset's records (None: the no-tool prompt)."""
    requests = [(s, None if sub is None else [records[s.id][t] for t in sub]) for s, sub in zip(samples, subsets)]
    return reasoner.answer_many(requests)


def run_method(reasoner, samples, records, subsets: list[Subset]) -> MethodResult:
    predictions = ask(reasoner, samples, records, [sub if sub else None for sub in subsets])
    return MethodResult(list(subsets), predictions, [is_correct(s, p) for s, p in zip(samples, predictions)])


def oracle(reasoner, samples, records, candidates: list[Subset]) -> MethodResult:
    """Per sample, the smallest candidate subset whose answer is right (or the first, if none is)."""
    per_candidate = {c: run_method(reasoner, samples, records, [c] * len(samples)) for c in candidates}
    subsets, predictions, correct = [], [], []
    for i in range(len(samples)):
        right = [c for c in candidates if per_candidate[c].correct[i]]
        chosen = min(right, key=len) if right else candidates[0]
        subsets.append(chosen)
        predictions.append(per_candidate[chosen].predictions[i])
        correct.append(bool(right))
    return MethodResult(subsets, predictions, correct)


def summarise(samples: list[Sample], result: MethodResult) -> dict:
    by_domain: dict[str, list[bool]] = defaultdict(list)
    for sample, ok in zip(samples, result.correct):
        by_domain[sample.domain or "all"].append(ok)
    calls = Counter(t for sub in result.subsets for t in sub)
    n = len(samples)
    return {"accuracy": sum(result.correct) / n if n else 0.0,
            "by_domain": {d: sum(v) / len(v) for d, v in sorted(by_domain.items())},
            "avg_tools": sum(len(s) for s in result.subsets) / n if n else 0.0,
            "tool_calls": {t: calls.get(t, 0) for t in TOOL_IDS}, "n": n}


def versus(reference: MethodResult, other: MethodResult) -> dict:
    """Improved / Degraded / Both-correct / Both-wrong counts of ``other`` against ``reference``."""
    pairs = Counter((a, b) for a, b in zip(reference.correct, other.correct))
    return {"improved": pairs[(False, True)], "degraded": pairs[(True, False)],
            "both_correct": pairs[(True, True)], "both_wrong": pairs[(False, False)]}


def evaluate(samples: list[Sample], records: dict[str, dict], reasoner, methods: list[str],
             policy_select: Callable[[list[Sample]], list[Subset]] | None = None, random_seed: int = 0,
             desc_margin: float = 0.05, desc_floor: float = 0.15, progress: bool = False) -> tuple[dict, dict[str, MethodResult]]:
    """Run ``methods`` and return (the ``methods`` block of metrics.json, raw results by name)."""
    from .progress import progress as tqdm

    plan: list[tuple[str, Callable[[], MethodResult]]] = []
    wanted = set(methods)
    fixed = lambda sub: lambda: run_method(reasoner, samples, records, [sub] * len(samples))  # noqa: E731
    if "no_tool" in wanted or "policy" in wanted:
        plan.append(("no_tool", fixed(())))
    if "random" in wanted:
        selector = RandomSelector(random_seed)
        plan.append(("random", lambda: run_method(reasoner, samples, records, [selector.select(s) for s in samples])))
    if "all_tools" in wanted:
        plan.append(("all_tools", fixed(tuple(TOOL_IDS))))
    if "tools_desc" in wanted:
        def tools_desc():
            selector = DescriptionSelector(desc_margin, desc_floor)
            return run_method(reasoner, samples, records, [selector.select(s) for s in samples])
        plan.append(("tools_desc", tools_desc))
    if "single" in wanted:
        plan += [(f"single:{t}", fixed((t,))) for t in TOOL_IDS]
    if "oracle_single" in wanted:
        plan.append(("oracle_single", lambda: oracle(reasoner, samples, records, [(t,) for t in TOOL_IDS])))
    if "oracle_subsets" in wanted:
        plan.append(("oracle_subsets", lambda: oracle(reasoner, samples, records, all_subsets())))
    if "policy" in wanted and policy_select is not None:
        plan.append(("policy", lambda: run_method(reasoner, samples, records, policy_select(samples))))
    results: dict[str, MethodResult] = {}
    for name, run in tqdm(plan, desc="evaluate", unit="method", disable=not progress):
        results[name] = run()
    block = {name: summarise(samples, r) for name, r in results.items()}
    if "no_tool" in results:
        for name, r in results.items():
            if name != "no_tool":
                block[name]["vs_no_tool"] = versus(results["no_tool"], r)
    return block, results


def write_outputs(out_dir: str | Path, dataset: str, reasoner_name: str, samples: list[Sample], block: dict,
                  results: dict[str, MethodResult], plots: bool = True, extra: dict | None = None) -> dict:
    """Write metrics.json, predictions.jsonl, report.md and the plots; return the metrics."""
    from .report import markdown_report, plot_accuracy, plot_tool_calls

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics = {"dataset": dataset, "reasoner": reasoner_name, "n": len(samples), "methods": block, **(extra or {})}
    tmp = out / "metrics.json.tmp"
    tmp.write_text(json.dumps(metrics, indent=2))
    tmp.replace(out / "metrics.json")
    with open(out / "predictions.jsonl", "w") as handle:
        for name, r in results.items():
            for s, sub, pred, ok in zip(samples, r.subsets, r.predictions, r.correct):
                handle.write(json.dumps({"id": s.id, "method": name, "domain": s.domain, "category": s.category,
                                         "tools": list(sub), "prediction": pred, "answer": s.answer, "correct": ok}) + "\n")
    (out / "report.md").write_text(markdown_report(metrics))
    if plots:
        plot_accuracy(metrics, out / "accuracy.png")
        plot_tool_calls(metrics, out / "tool_calls.png")
    return metrics

"""The evaluation harness: every baseline of the paper, for one reasoner and one dataset.

Methods (``metrics.json`` names): ``no_tool``, ``random``, ``all_tools``, ``tools_desc``,
``single:<tool>`` for each enabled tool, ``oracle_single`` (right if any single tool's path is
right), ``oracle_subsets`` (right if any subset's path is right), ``oracle_kind`` (the best fixed
subset per question kind: the ceiling of a lookup table from question type to tools),
``oracle_labels`` (each item's labelled tools, those whose output reveals its answer; only for a
dataset labelled on every scorable row, as the embedded benchmark is) and ``policy`` (a trained plugin).
On request only (:data:`AGENTIC_METHODS`): ``agentic_only`` (the reasoner asks for tools itself,
Audio-Maestro's loop) and ``agentic`` (the same loop with the plugin's records already in front);
see :mod:`autagent.reasoners.tool_loop`.
Every reasoner call goes through the answer cache, so methods share answers.

Every row counts: a row the loader could not score, a clip no tool or reasoner could read and a
call that failed are all in ``n`` and wrong in ``accuracy``; ``official`` reproduces the published
scripts (missing predictions skipped) for comparison with papers.
"""

from __future__ import annotations

import functools
import json
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rewards.scoring import is_correct

from ..data.progress import progress as tqdm
from ..data.sample import Sample
from ..policies.baselines import DescriptionSelector, RandomSelector, all_subsets
from ..reasoners.base import ask_with_records
from ..reasoners.tool_loop import AgenticConfig, AgenticRun, ItemResult
from .plots import plot_accuracy, plot_cost_curve, plot_tool_calls
from .report import label, markdown_report
from .summary import MethodResult, Subset, selection_quality, summarise, versus

METHODS = (
    "no_tool",
    "random",
    "all_tools",
    "tools_desc",
    "single",
    "oracle_single",
    "oracle_subsets",
    "oracle_kind",
    "oracle_labels",
    "policy",
)
AGENTIC_METHODS = ("agentic_only", "agentic")  # the reasoner calls tools itself; run only when named
SELECTORS = ("random", "tools_desc", "oracle_subsets", "oracle_kind", "policy", *AGENTIC_METHODS)  # choice scored


@dataclass
class EvalConfig:
    methods: list = field(default_factory=lambda: list(METHODS))
    """Baselines to run (every one of :data:`METHODS` by default; ``single:<tool>`` for one tool)."""
    random_seed: int = 0
    """Seed of the Random Selection baseline."""
    desc_margin: float = 0.05
    """Tools-with-descriptions: pick tools within this similarity of the best..."""
    desc_floor: float = 0.15
    """...and at least this similar to the question."""
    oracle_max_size: int | None = None
    """Largest subset the all-subsets oracle tries (None: every subset up to 8 tools, pairs beyond)."""
    plots: bool = True
    """Write the PNG plots."""
    add_tools: list = field(default_factory=list)
    """Tools the policy never trained with, added after training: a second evaluation
    (``<run>/added/``) runs every method with them, and a ``tool_conditioned`` router scores them from
    their descriptions (the held-out-tool experiment)."""
    agentic: AgenticConfig = field(default_factory=AgenticConfig)
    """The loop of the ``agentic`` and ``agentic_only`` methods (who asks for tools, how many rounds)."""
    max_tools: int | None = None
    """The dial on the ``policy`` method: at most this many tools per query (:mod:`autagent.plugin.dial`)."""
    latency_budget_ms: float | None = None
    """The dial on the ``policy`` method: tools whose measured seconds (summed) fit in this many ms."""
    tools: int | None = None
    """The dial on the ``policy`` method: exactly this many tools per query, the most probable (a point of
    the cost curve)."""
    uncertified: bool = False
    """The ``policy`` method at the plugin's trained threshold even where it carries a certified point."""
    cost_curve: bool = True
    """With a router plugin: the accuracy-against-tools curve (its K most probable tools, K = 0..T, and its
    threshold) beside a fixed order's (:mod:`autagent.evaluation.cost_curve`), in metrics, report and plot."""
    max_failed_answers: int = 3
    """More reasoner calls failing than this (a server timing out, refusing) marks the evaluation incomplete:
    its figures say so, ``autagent eval`` exits 1 naming the count (failed answers count as wrong)."""
    curve_max_k: int | None = None
    """The cost curve's points stop at this many tools (None: every K up to all tools): the points past it
    cost an answer per item each and say little where a certificate's candidates stop."""
    curve_train_queries: int = 120
    """A plugin recording no tool values: the fixed order is measured on this many training queries of the
    run's data, asked of the eval's reasoner (0: no fixed order for such plugins)."""


def check_methods(methods, tool_ids) -> None:
    """Refuse unknown method names (``single:<tool>`` must name an enabled tool)."""
    for name in methods:
        if name in METHODS or name in AGENTIC_METHODS:
            continue
        if name.startswith("single:") and name.split(":", 1)[1] in tool_ids:
            continue
        known = ", ".join(METHODS + AGENTIC_METHODS)
        raise ValueError(f"eval.methods: unknown method {name!r}; known: {known}, single:<enabled tool>")


def run_method(reasoner, samples, records, subsets: list[Subset]) -> MethodResult:
    replies = ask_with_records(reasoner, samples, records, subsets)
    return MethodResult(
        list(subsets),
        [r.text for r in replies],
        [is_correct(s, r.text) for s, r in zip(samples, replies)],
        [r.error for r in replies],
    )


def timed_selection(policy_select, samples) -> tuple[list[Subset], float]:
    """The policy's subsets and its selection's seconds per query."""
    import time

    started = time.perf_counter()
    subsets = [tuple(s) for s in policy_select(samples)]
    return subsets, (time.perf_counter() - started) / max(len(samples), 1)


def agentic_method(
    run: AgenticRun, samples, records, tool_ids, selection: tuple[list[Subset], float] | None = None
) -> MethodResult:
    """Every sample through the loop, with ``selection``'s records in front (none: ``agentic_only``)."""
    subsets, select_seconds = selection or ([()] * len(samples), 0.0)
    items: list[ItemResult] = run.run(samples, records, subsets, tool_ids)
    n = max(len(items), 1)
    rounds = Counter(c.round for i in items for c in i.calls)
    stats = {
        "rounds": sum(i.rounds for i in items) / n,
        "calls": sum(len(i.calls) for i in items) / n,
        "calls_by_round": {str(r): rounds[r] for r in sorted(rounds)},
        "select_seconds": select_seconds,
        "seconds": select_seconds + sum(i.seconds for i in items) / n,
        "caller": run.caller.name,
        "max_rounds": run.max_rounds,
    }
    return MethodResult(
        [i.tools for i in items],
        [i.prediction for i in items],
        [is_correct(s, i.prediction) for s, i in zip(samples, items)],
        [i.error for i in items],
        stats,
    )


def every_subset(reasoner, samples, records, candidates: list[Subset]) -> dict[Subset, MethodResult]:
    """Each candidate subset applied to every sample, asked in one batch (a reasoner that shares one
    query's record lines across its subsets, as the cascade does, sees them together)."""
    n = len(samples)
    together = run_method(reasoner, samples * len(candidates), records, [c for c in candidates for _ in range(n)])
    return {
        c: MethodResult(
            *(getattr(together, f)[k * n : (k + 1) * n] for f in ("subsets", "predictions", "correct", "errors"))
        )
        for k, c in enumerate(candidates)
    }


def oracle(
    reasoner, samples, records, candidates: list[Subset], per_candidate: dict[Subset, MethodResult] | None = None
) -> MethodResult:
    """Per sample, the smallest candidate subset whose answer is right (or the first, if none is)."""
    per_candidate = per_candidate or every_subset(reasoner, samples, records, candidates)
    subsets, predictions, correct, errors = [], [], [], []
    for i in range(len(samples)):
        right = [c for c in candidates if per_candidate[c].correct[i]]
        chosen = min(right, key=len) if right else candidates[0]
        subsets.append(chosen)
        predictions.append(per_candidate[chosen].predictions[i])
        correct.append(bool(right))
        errors.append(per_candidate[chosen].errors[i])
    return MethodResult(subsets, predictions, correct, errors)


def lookup_oracle(samples, per_candidate: dict[Subset, MethodResult]) -> MethodResult:
    """Per question kind (``category``), the one subset right most often on it (fewest tools on ties).
    Chosen on the evaluated split itself, so it bounds from above any selector that only recognises the
    kind from the question: a router must beat it to show it reads the choices or the audio."""
    by_kind: dict[str, list[int]] = defaultdict(list)
    for i, sample in enumerate(samples):
        by_kind[str(sample.category)].append(i)
    chosen: list[Subset] = [()] * len(samples)
    for rows in by_kind.values():
        best = max(per_candidate, key=lambda c: (sum(per_candidate[c].correct[i] for i in rows), -len(c)))
        for i in rows:
            chosen[i] = best
    picked = [per_candidate[c] for c in chosen]
    return MethodResult(
        chosen,
        [r.predictions[i] for i, r in enumerate(picked)],
        [r.correct[i] for i, r in enumerate(picked)],
        [r.errors[i] for i, r in enumerate(picked)],
    )


def labelled_subsets(samples: list[Sample], tool_ids: Subset) -> list[Subset] | None:
    """Each sample's labelled tools (``meta.tools``: those whose output reveals the answer) among
    ``tool_ids``, in their order (none for a row the loader could not score); None unless every
    scorable sample carries the label (published benchmarks do not)."""
    scorable = [s for s in samples if not s.meta.get("unscorable")]
    if not scorable or not all(isinstance(s.meta.get("tools"), list) for s in scorable):
        return None
    return [tuple(t for t in tool_ids if t in (s.meta.get("tools") or ())) for s in samples]


def evaluate(
    samples: list[Sample],
    records: dict[str, dict],
    reasoner,
    methods: list[str],
    tool_ids,
    policy_select: Callable[[list[Sample]], list[Subset]] | None = None,
    random_seed: int = 0,
    desc_margin: float = 0.05,
    desc_floor: float = 0.15,
    oracle_max_size: int | None = None,
    progress: bool = False,
    agentic: AgenticRun | None = None,
) -> tuple[dict, dict[str, MethodResult]]:
    """Run ``methods`` and return (the ``methods`` block of metrics.json, raw results by name); the
    agentic methods need ``agentic`` (the loop's caller)."""
    tool_ids = tuple(tool_ids)
    check_methods(methods, tool_ids)
    plan: list[tuple[str, Callable[[], MethodResult]]] = []
    wanted = set(methods)
    subsets = all_subsets(tool_ids, oracle_max_size)  # the subset oracles' candidates
    fixed = lambda sub: lambda: run_method(reasoner, samples, records, [sub] * len(samples))  # noqa: E731
    if "no_tool" in wanted or "policy" in wanted:
        plan.append(("no_tool", fixed(())))
    if "random" in wanted:
        selector = RandomSelector(tool_ids, random_seed)
        plan.append(("random", lambda: run_method(reasoner, samples, records, [selector.select(s) for s in samples])))
    if "all_tools" in wanted:
        plan.append(("all_tools", fixed(tool_ids)))
    if "tools_desc" in wanted:

        def tools_desc():
            selector = DescriptionSelector(tool_ids, desc_margin, desc_floor)
            return run_method(reasoner, samples, records, [selector.select(s) for s in samples])

        plan.append(("tools_desc", tools_desc))
    singles = tool_ids if "single" in wanted else tuple(t for t in tool_ids if f"single:{t}" in wanted)
    plan += [(f"single:{t}", fixed((t,))) for t in singles]
    if "oracle_single" in wanted:
        plan.append(("oracle_single", lambda: oracle(reasoner, samples, records, [(t,) for t in tool_ids])))
    # every subset's answers, computed once for both subset oracles (setdefault would compute them per call)
    answers = functools.cache(lambda: every_subset(reasoner, samples, records, subsets))
    if "oracle_subsets" in wanted:
        plan.append(("oracle_subsets", lambda: oracle(reasoner, samples, records, subsets, answers())))
    if "oracle_kind" in wanted:
        plan.append(("oracle_kind", lambda: lookup_oracle(samples, answers())))
    labelled = labelled_subsets(samples, tool_ids) if "oracle_labels" in wanted else None
    if labelled is not None:
        plan.append(("oracle_labels", lambda: run_method(reasoner, samples, records, labelled)))
    selection = functools.cache(lambda: timed_selection(policy_select, samples))  # once for policy and agentic
    if "policy" in wanted and policy_select is not None:

        def policy():
            result = run_method(reasoner, samples, records, selection()[0])
            result.stats = {"select_seconds": selection()[1]}
            return result

        plan.append(("policy", policy))
    for name in AGENTIC_METHODS:
        if name not in wanted or (name == "agentic" and policy_select is None):
            continue
        if agentic is None:
            raise ValueError(f"eval.methods: {name} needs the loop's caller (eval.agentic)")
        chosen = selection if name == "agentic" else lambda: None
        plan.append((name, lambda chosen=chosen: agentic_method(agentic, samples, records, tool_ids, chosen())))
    results: dict[str, MethodResult] = {}
    for name, run in tqdm(plan, desc="evaluate", unit="method", disable=not progress):
        results[name] = run()
    block = {name: summarise(samples, r, tool_ids) for name, r in results.items()}
    for name, r in results.items():
        quality = selection_quality(samples, r.subsets) if name in SELECTORS else None
        if quality:
            block[name]["selection"] = quality
        for reference in ("no_tool", "all_tools"):  # each method against both ends, paired over the items
            if name != reference and reference in results:
                block[name][f"vs_{reference}"] = versus(results[reference], r)
    return block, results


def write_outputs(
    out_dir: str | Path,
    dataset: str,
    reasoner_name: str,
    samples: list[Sample],
    block: dict,
    results: dict[str, MethodResult],
    tool_ids,
    plots: bool = True,
    extra: dict | None = None,
) -> dict:
    """Write metrics.json, predictions.jsonl, report.md and the plots; return the metrics."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics = {
        "dataset": dataset,
        "reasoner": reasoner_name,
        "n": len(samples),
        "tools": list(tool_ids),
        "labels": {name: label(name) for name in block},  # the names reports, plots and the model card show
        "unscorable": [
            {"id": s.id, "row": s.meta.get("row"), "reason": s.meta["unscorable"]}
            for s in samples
            if s.meta.get("unscorable")
        ],
        "methods": block,
        **(extra or {}),
    }
    tmp = out / "metrics.json.tmp"
    tmp.write_text(json.dumps(metrics, indent=2))
    tmp.replace(out / "metrics.json")
    with open(out / "predictions.jsonl", "w") as handle:
        for name, r in results.items():
            for s, sub, pred, ok, err in zip(samples, r.subsets, r.predictions, r.correct, r.errors):
                row = {
                    "id": s.id,
                    "method": name,
                    "domain": s.domain,
                    "category": s.category,
                    "tools": list(sub),
                    "prediction": pred,
                    "answer": s.answer,
                    "correct": ok,
                }
                if err:
                    row["error"] = err
                handle.write(json.dumps(row) + "\n")
    (out / "report.md").write_text(markdown_report(metrics))
    if plots:
        plot_accuracy(metrics, out / "accuracy.png")
        plot_tool_calls(metrics, out / "tool_calls.png")
        if metrics.get("cost_curve"):
            plot_cost_curve(metrics, out / "cost_curve.png")
    return metrics

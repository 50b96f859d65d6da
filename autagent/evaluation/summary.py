"""What a method's run gives (:class:`MethodResult`) and the figures ``metrics.json`` makes of it: accuracy with
its interval, per domain, category and sub-category, the official scripts' figure, tool calls, selection against
the generator's knowledge, improved/degraded against No-Tool, tool errors and the price check.  Pure functions of
the results: :mod:`.harness` runs the methods."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from rewards.scoring import official_correct

from ..data.sample import Sample
from .paired import paired_difference
from .report import wilson

Subset = tuple[str, ...]


@dataclass
class MethodResult:
    subsets: list[Subset]
    predictions: list[str | None]
    correct: list[bool]
    errors: list[str | None]
    stats: dict = field(default_factory=dict)
    """Per-method figures beyond accuracy (the agentic loop's rounds, calls and seconds per query)."""


def _rates(samples, result: MethodResult, key: Callable) -> dict:
    """Accuracy and n per value of ``key``, and the domains its rows are from (a report's tables are
    split by domain)."""
    groups: dict[str, list[bool]] = defaultdict(list)
    domains: dict[str, set[str]] = defaultdict(set)
    for sample, ok in zip(samples, result.correct):
        value = key(sample)
        if value:
            groups[str(value)].append(ok)
            domains[str(value)].add(sample.domain or "all")
    return {
        k: {"accuracy": sum(v) / len(v), "n": len(v), "domains": sorted(domains[k])} for k, v in sorted(groups.items())
    }


def summarise(samples: list[Sample], result: MethodResult, tool_ids) -> dict:
    n = len(samples)
    official = [official_correct(s, p) for s, p in zip(samples, result.predictions)]
    scored = [x for x in official if x is not None]
    calls = Counter(t for sub in result.subsets for t in sub)
    per_domain = _rates(samples, result, lambda s: s.domain or "all")
    accuracy = sum(result.correct) / n if n else 0.0
    return {
        "accuracy": accuracy,
        "interval_95": [round(bound, 4) for bound in wilson(accuracy, n)],  # Wilson's, over the n rows
        "n": n,
        "official": {
            "accuracy": sum(scored) / len(scored) if scored else 0.0,
            "n": len(scored),
            "skipped": n - len(scored),
        },
        "errors": sum(e is not None for e in result.errors),
        "by_domain": {d: v["accuracy"] for d, v in per_domain.items()},
        "by_domain_n": {d: v["n"] for d, v in per_domain.items()},
        "by_category": _rates(samples, result, lambda s: s.category),
        "by_subcategory": _rates(samples, result, lambda s: s.meta.get("sub-category")),
        "avg_tools": sum(len(s) for s in result.subsets) / n if n else 0.0,
        "tool_calls": {t: calls.get(t, 0) for t in tool_ids},
        **result.stats,
    }


def selection_quality(samples: list[Sample], subsets: list[Subset]) -> dict | None:
    """Against what the generator knows (``meta.tools``, the tools that reveal each answer): tool
    precision and recall per question kind, and the share of items answerable by hearing alone
    (``meta.tools == []``) on which nothing was called.  None for datasets without that knowledge."""
    known = [(s, set(z)) for s, z in zip(samples, subsets) if isinstance(s.meta.get("tools"), list)]
    if not known:
        return None
    per_kind: dict[str, list] = defaultdict(lambda: [0, 0, 0])  # true positives, called, needed
    per_tool: dict[str, list] = defaultdict(lambda: [0, 0, 0])
    for sample, called in known:
        needed = set(sample.meta["tools"])
        counts = per_kind[sample.category]
        counts[0] += len(called & needed)
        counts[1] += len(called)
        counts[2] += len(needed)
        for tool in called | needed:
            row = per_tool[tool]
            row[0] += tool in called and tool in needed
            row[1] += tool in called
            row[2] += tool in needed
    hearing = [not called for s, called in known if not s.meta["tools"]]
    return {
        "per_kind": {
            k: {"precision": tp / c if c else None, "recall": tp / nd if nd else None}
            for k, (tp, c, nd) in sorted(per_kind.items())
        },
        "per_tool": {
            t: {"precision": tp / c if c else None, "recall": tp / nd if nd else None, "called": c, "needed": nd}
            for t, (tp, c, nd) in sorted(per_tool.items())
        },
        "precision": sum(v[0] for v in per_kind.values()) / max(sum(v[1] for v in per_kind.values()), 1),
        "recall": sum(v[0] for v in per_kind.values()) / max(sum(v[2] for v in per_kind.values()), 1),
        "no_call_share_on_hearing_items": sum(hearing) / len(hearing) if hearing else None,
    }


def versus(reference: MethodResult, other: MethodResult) -> dict:
    """Improved / Degraded / Both-correct / Both-wrong counts of ``other`` against ``reference``, and the
    difference in accuracy with its exact paired 95 % interval over the items (:mod:`.paired`)."""
    pairs = Counter((a, b) for a, b in zip(reference.correct, other.correct))
    paired = paired_difference(reference.correct, other.correct)
    return {
        "improved": pairs[(False, True)],
        "degraded": pairs[(True, False)],
        "both_correct": pairs[(True, True)],
        "both_wrong": pairs[(False, False)],
        "difference": round(paired["difference"], 4),
        "interval_95": paired["interval"],
    }


def tool_error_counts(samples: list[Sample], records: dict[str, dict]) -> dict[str, int]:
    """Error records per tool over the scorable rows (a clip no tool could read counts for each tool)."""
    counts: Counter = Counter()
    for sample in samples:
        if not sample.meta.get("unscorable"):
            counts.update(t for t, r in records.get(sample.id, {}).items() if "error" in r)
    return dict(sorted(counts.items()))


def price_check(block: dict, price: float) -> dict:
    """What the price means against this reasoner: the expected reward per query (accuracy gained over
    No-Tool, minus the price per tool called) of No-Tool, All-Tools, the labelled-tools oracle and the
    policy, at the price the run trained with (one answer gained is 1)."""
    if "no_tool" not in block:
        return {}
    base = block["no_tool"]["accuracy"]
    named = ("no_tool", "all_tools", "oracle_labels", "policy")
    return {
        "price": price,
        **{
            name: round(block[name]["accuracy"] - base - price * block[name]["avg_tools"], 4)
            for name in named
            if name in block
        },
    }

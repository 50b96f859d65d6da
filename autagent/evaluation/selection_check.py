"""Tool selection on questions nobody here wrote: ``autagent check-selection``.

A labelled set (``experiments/transfer/questions.jsonl``: real questions and choices from public
audio-QA benchmarks other than MMAU and MMAR, each hand-labelled with the tools whose output would
reveal the answer, none allowed) is run through a plugin's selection and through the untrained
Tools-with-Descriptions selector, over stand-in audio of each item's domain (speech, music, a sound,
a mixture), made and loaded with the labels by :mod:`autagent.data.labelled`.  It measures transfer; it
never teaches: nothing reads these texts for training or for the benchmark generator.

Per selector, over (item, tool) pairs: precision (called tools that were labelled), recall (labelled
tools that were called), F1, calls per item, the share of the items labelled with no tool on which
nothing was called, the empty-selection rate (items on which nothing was called, and among the items
needing a tool, those left without one), and each tool's calls, labels and hits.  Tools named
``optional`` (a tool the training reasoner already hears, say) are neither credited nor penalised: they
are removed from the labels and from the calls before counting.  The same check scores a back-off's
calibration phrasings (``experiments/transfer/calibration.jsonl``, written for it, never the transfer
set's).
"""

from __future__ import annotations

from ..data.labelled import Labelled


def score(items: list[Labelled], subsets: list[tuple[str, ...]], optional=()) -> dict:
    """Precision, recall and F1 over (item, tool) pairs, calls per item and the no-tool items left
    toolless; ``optional`` tools are removed from labels and calls first."""
    optional = set(optional)
    hits = called = needed = 0
    quiet, no_tool_items, empty, tool_items, empty_tool_items = 0, 0, 0, 0, 0
    per_tool: dict[str, dict[str, int]] = {}
    for item, subset in zip(items, subsets):
        calls = set(subset) - optional
        labels = set(item.tools) - optional
        hits += len(calls & labels)
        called += len(calls)
        needed += len(labels)
        if not item.tools:
            no_tool_items += 1
            quiet += not calls
        empty += not calls
        if labels:
            tool_items += 1
            empty_tool_items += not calls
        for tool in calls | labels:
            row = per_tool.setdefault(tool, {"called": 0, "needed": 0, "right": 0})
            row["called"] += tool in calls
            row["needed"] += tool in labels
            row["right"] += tool in calls and tool in labels
    precision = hits / called if called else 0.0
    recall = hits / needed if needed else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "calls_per_item": sum(len(set(s) - optional) for s in subsets) / max(len(items), 1),
        "no_tool_items_left_toolless": quiet / no_tool_items if no_tool_items else None,
        "empty_selections": empty / max(len(items), 1),
        "empty_on_tool_items": empty_tool_items / tool_items if tool_items else None,
        "per_tool": dict(sorted(per_tool.items())),
        "n": len(items),
    }


def check(selectors: dict, items: list[Labelled], optional=()) -> dict:
    """Every selector (name -> ``select_many(samples)``) scored on the labelled items, both ways: every
    label required, and ``optional`` tools exempt."""
    samples = [item.sample for item in items]
    out = {}
    for name, select_many in selectors.items():
        subsets = [tuple(s) for s in select_many(samples)]
        out[name] = {"all_labels": score(items, subsets), "optional_exempt": score(items, subsets, optional)}
        out[name]["optional"] = sorted(optional)
    return out


def description_selector(tool_ids):
    """The untrained Tools-with-Descriptions baseline over ``tool_ids``, as a ``select_many``."""
    # lazy: it imports torch, which this module does not need otherwise
    from ..policies.baselines import DescriptionSelector

    selector = DescriptionSelector(tool_ids)
    return lambda samples: [selector.select(s) for s in samples]


def table(result: dict) -> str:
    lines = [
        "| selector | labels | precision | recall | F1 | calls per item | no-tool items left toolless "
        "| empty selections | empty on items needing a tool |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, both in result.items():
        for how in ("all_labels", "optional_exempt"):
            m = both[how]
            label = "all required" if how == "all_labels" else f"{', '.join(both['optional']) or 'none'} optional"
            quiet, empty = (percent(m[k]) for k in ("no_tool_items_left_toolless", "empty_on_tool_items"))
            lines.append(
                f"| {name} | {label} | {100 * m['precision']:.1f} | {100 * m['recall']:.1f} | {m['f1']:.3f} | "
                f"{m['calls_per_item']:.2f} | {quiet} | {100 * m['empty_selections']:.1f} | {empty} |"
            )
    return "\n".join(lines) + "\n"


def percent(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.1f}"


def per_tool_table(result: dict) -> str:
    """Per selector and tool, with the optional tools exempt: calls, labels, hits, precision, recall."""
    lines = ["| selector | tool | called | labelled | right | precision | recall |", "|---|---|---|---|---|---|---|"]
    for name, both in result.items():
        for tool, row in both["optional_exempt"]["per_tool"].items():
            precision = percent(row["right"] / row["called"] if row["called"] else None)
            recall = percent(row["right"] / row["needed"] if row["needed"] else None)
            lines.append(
                f"| {name} | {tool} | {row['called']} | {row['needed']} | {row['right']} | {precision} | {recall} |"
            )
    return "\n".join(lines) + "\n"

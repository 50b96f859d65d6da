"""The accuracy-against-tools curve of a router plugin, beside a fixed order's.

Why: the dial (:mod:`autagent.plugin.dial`) lets a user buy accuracy with tool calls at serve time;
this curve says what each price buys.  At each K = 0..T the plugin's K most probable tools per query
(whatever its threshold), and at the threshold the plugin's own selection.  Beside it, the curve a user
could build **without learning**: the same K tools for every query, added in the order of their
average gain alone over no tool on the training queries (``tool_values`` in the manifest, recorded at
export).  The learned curve earns its keep where it lies above the fixed one.

Every point is a plain evaluation through the answer cache (K = 0 is No-Tool, K = T All-Tools; the
subset oracles have usually asked the rest), so the curve is cheap where those ran.
"""

from __future__ import annotations

from ..plugin.dial import top_k


def fixed_order(manifest: dict, tool_ids) -> tuple[list[str], str] | None:
    """The tools by their recorded average value on training queries, best first (ties: the run's tool
    order), and where the values come from; None when the plugin records none (exported before the dial)."""
    values = manifest.get("tool_values") or {}
    if not values or any(t not in values for t in tool_ids):
        return None
    order = sorted(tool_ids, key=lambda t: (-float(values[t]), list(tool_ids).index(t)))
    return order, str(manifest.get("tool_values_source", "the training queries"))


def _point(k, result) -> dict:
    n = max(len(result.correct), 1)
    return {
        "k": k,
        "accuracy": round(sum(result.correct) / n, 4),
        "avg_tools": round(sum(len(z) for z in result.subsets) / n, 4),
    }


def cost_curve(plugin, samples, run, tool_ids, block: dict, values: tuple[dict, str] | None = None) -> dict:
    """``metrics.json``'s ``cost_curve``: the plugin's top-K points, the fixed order's, its threshold's
    point (the ``policy`` method of ``block``) and the gap at each K (learned − fixed); ``run(subsets)``
    evaluates one subset per sample (the harness's ``run_method`` on this reasoner and these records);
    ``values``: (tool values, their source) measured at eval for a plugin that records none."""
    tool_ids = tuple(tool_ids)
    _, scores = plugin.scores_many(samples)
    order = list(plugin.tools)
    learned = []
    for k in range(len(tool_ids) + 1):
        subsets = [tuple(t for t in tool_ids if t in z) for z in top_k(scores, order, k)]
        learned.append(_point(k, run(subsets)))
    out = {"plugin": learned, "threshold": None, "fixed_order": None}
    if "policy" in block:
        out["threshold"] = {"accuracy": block["policy"]["accuracy"], "avg_tools": block["policy"]["avg_tools"]}
    recorded = {"tool_values": values[0], "tool_values_source": values[1]} if values else plugin.manifest
    found = fixed_order(recorded, tool_ids)
    if found is not None:
        ranked, source = found
        points = []
        for k in range(len(tool_ids) + 1):
            subset = tuple(t for t in tool_ids if t in ranked[:k])
            points.append(_point(k, run([subset] * len(samples))))
        gaps = [round(a["accuracy"] - b["accuracy"], 4) for a, b in zip(learned, points)]
        out["fixed_order"] = {"order": ranked, "source": source, "points": points, "gap": gaps}
    return out

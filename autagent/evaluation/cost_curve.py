"""The accuracy-against-tools curve of a router plugin, beside a fixed order's.

Why: the dial (:mod:`autagent.plugin.dial`) lets a user buy accuracy with tool calls at serve time;
this curve says what each price buys.  At each K = 0..T the plugin's K most probable tools per query
(whatever its threshold), and at the threshold the plugin's own selection.  Beside it, the curve a user
could build **without learning**: the same K tools for every query, added in the order of their
average gain alone over no tool on the training queries (``tool_values`` in the manifest, recorded at
export).  The learned curve earns its keep where it lies above the fixed one.

Every point is a plain evaluation through the answer cache (K = 0 is No-Tool, K = T All-Tools; the
subset oracles have usually asked the rest), so the curve is cheap where those ran.  The learned points
are selected by the plugin's own ``select_many`` with ``Dial(tools=K)``: the function ``--tools K`` runs in
``select``, ``serve`` and ``eval``, so a point of this curve is what the shipped dial gives.  Each point
also carries its tool-seconds per answer (:func:`autagent.plugin.dial.tool_seconds_of`), so the curve
reads against seconds as well as against tools.
"""

from __future__ import annotations

from ..plugin.dial import Dial, recorded_seconds, select_at, tool_seconds_of
from .paired import paired_difference


def fixed_order(manifest: dict, tool_ids) -> tuple[list[str], str] | None:
    """The tools by their recorded average value on training queries, best first (ties: the run's tool
    order), and where the values come from; None when the plugin records none (exported before the dial)."""
    values = manifest.get("tool_values") or {}
    if not values or any(t not in values for t in tool_ids):
        return None
    order = sorted(tool_ids, key=lambda t: (-float(values[t]), list(tool_ids).index(t)))
    return order, str(manifest.get("tool_values_source", "the training queries"))


def _point(k, result, seconds: dict) -> dict:
    n = max(len(result.correct), 1)
    point = {
        "k": k,
        "accuracy": round(sum(result.correct) / n, 4),
        "avg_tools": round(sum(len(z) for z in result.subsets) / n, 4),
    }
    spent = tool_seconds_of(result.subsets, seconds)
    return point | ({"tool_seconds": spent} if spent else {})


def learned_results(plugin, samples, run, tool_ids, max_k: int) -> list:
    """The plugin's K = 0..T results: its own selection with ``Dial(tools=K)``, the dial a user sets with
    ``--tools K`` (the plugin's dial is put back after)."""
    return [
        run([tuple(t for t in tool_ids if t in z) for z in select_at(plugin, samples, Dial(tools=k))])
        for k in range(max_k + 1)
    ]


def cost_curve(
    plugin, samples, run, tool_ids, block: dict, values: tuple[dict, str] | None = None, max_k: int | None = None
) -> dict:
    """``metrics.json``'s ``cost_curve``: the plugin's top-K points, the fixed order's, its threshold's
    point (the ``policy`` method of ``block``) and the gap at each K (learned − fixed); ``run(subsets)``
    evaluates one subset per sample (the harness's ``run_method`` on this reasoner and these records);
    ``values``: (tool values, their source) measured at eval for a plugin that records none; ``max_k``: the
    last K (default every tool)."""
    tool_ids = tuple(tool_ids)
    max_k = len(tool_ids) if max_k is None else min(max_k, len(tool_ids))
    seconds = recorded_seconds(plugin.manifest)
    learned_runs = learned_results(plugin, samples, run, tool_ids, max_k)
    learned = [_point(k, result, seconds) for k, result in enumerate(learned_runs)]
    out = {"plugin": learned, "threshold": None, "fixed_order": None}
    if "policy" in block:
        out["threshold"] = {"accuracy": block["policy"]["accuracy"], "avg_tools": block["policy"]["avg_tools"]}
        if "tool_seconds" in block["policy"]:
            out["threshold"]["tool_seconds"] = block["policy"]["tool_seconds"]
    recorded = {"tool_values": values[0], "tool_values_source": values[1]} if values else plugin.manifest
    found = fixed_order(recorded, tool_ids)
    if found is not None:
        ranked, source = found
        fixed_runs = [run([tuple(t for t in tool_ids if t in ranked[:k])] * len(samples)) for k in range(max_k + 1)]
        points = [_point(k, result, seconds) for k, result in enumerate(fixed_runs)]
        paired = [paired_difference(f.correct, g.correct) for f, g in zip(fixed_runs, learned_runs)]
        out["fixed_order"] = {
            "order": ranked,
            "source": source,
            "points": points,
            "gap": [round(p["difference"], 4) for p in paired],  # learned − fixed, the same items
            "gap_interval_95": [p["interval"] for p in paired],
        }
    return out

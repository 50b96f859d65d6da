"""report.md: an evaluation in Markdown, for a reader who did not write the code.

The paper's Table 2 layout (per domain and on average, every accuracy with its 95 % Wilson interval,
a warning under :data:`SMALL_SAMPLE` questions; the official figure and the error count only where
they say something), then one section per question: the gap closed, the price, the rows that could
not be scored, accuracy per category within each domain, against No-Tool, the tool calls, selection
against the generator's knowledge, and where the time went.  Each section is a function of the
metrics listed in :data:`SECTIONS`: a new one (a module of its own) is a function added there.
The plots are :mod:`.plots`'.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tools.registry import label_of

from .phases import table as phase_table

LABELS = {
    "no_tool": "No-Tool",
    "random": "Random Selection",
    "all_tools": "All-Tools",
    "tools_desc": "Tools-with-Descriptions",
    "oracle_single": "Oracle (single tool)",
    "oracle_subsets": "Oracle (all subsets)",
    "oracle_kind": "Oracle (one subset per kind)",
    "oracle_labels": "Oracle (labelled tools)",
    "policy": "AuTAgent (trained policy)",
    "agentic_only": "Reasoner calls tools (Audio-Maestro loop)",
    "agentic": "AuTAgent + reasoner calls tools",
}
SMALL_SAMPLE = 100
"""Below this many questions the report warns that its differences are mostly noise."""


def label(name: str) -> str:
    if name.startswith("single:"):
        return label_of(name.split(":", 1)[1])
    return LABELS.get(name, name)


def wilson(accuracy: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of an accuracy over ``n`` questions (sound at 0 and 1 and for
    small n, where the normal approximation's is not)."""
    if not n:
        return 0.0, 1.0
    centre = (accuracy + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(accuracy * (1 - accuracy) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def with_interval(accuracy: float | None, n: int | None) -> str:
    """``"37.2 (28–47)"``: the accuracy in % and its 95 % Wilson interval in whole points."""
    if accuracy is None:
        return "–"
    if not n:
        return f"{100 * accuracy:.1f}"
    low, high = wilson(accuracy, n)
    return f"{100 * accuracy:.1f} ({100 * low:.0f}–{100 * high:.0f})"


def small_sample_warning(n: int) -> str | None:
    """A line for evaluations under :data:`SMALL_SAMPLE` questions (None for larger ones)."""
    if n >= SMALL_SAMPLE:
        return None
    low, high = wilson(0.5, n)
    return (
        f"Small sample: {n} questions (< {SMALL_SAMPLE}). An accuracy near 50 % is known to within "
        f"±{50 * (high - low):.0f} points (95 %); differences smaller than the intervals are noise."
    )


def reasoner_title(name: str) -> str:
    """``embedded:embedded`` -> ``embedded``; ``openai:Qwen/Qwen2-Audio`` -> ``openai (Qwen/Qwen2-Audio)``."""
    kind, _, model = name.partition(":")
    return kind if not model or model == kind else f"{kind} ({model})"


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def _name(metrics: dict, method: str) -> str:
    return (metrics.get("labels") or {}).get(method) or label(method)


def headline(metrics: dict) -> list[str]:
    """Per domain and on average, with intervals; Official and Errors only where they differ from
    Avg and from zero."""
    methods, n = metrics["methods"], metrics["n"]
    domains = sorted({d for m in methods.values() for d in m["by_domain"]})
    sizes = next((m.get("by_domain_n") for m in methods.values() if m.get("by_domain_n")), {})
    official = any(abs(m["official"]["accuracy"] - m["accuracy"]) > 1e-9 for m in methods.values())
    errors = any(m["errors"] for m in methods.values())
    head = ["Method", *[f"{d.capitalize()} (n={sizes[d]})" if d in sizes else d.capitalize() for d in domains]]
    head += ["Avg (95 % interval)", *(["Official"] if official else []), *(["Errors"] if errors else []), "Avg tools"]
    rows = []
    for name, m in methods.items():
        cells = [_name(metrics, name), *[with_interval(m["by_domain"].get(d), sizes.get(d)) for d in domains]]
        cells.append(f"**{with_interval(m['accuracy'], n)}**")
        cells += [_pct(m["official"]["accuracy"])] if official else []
        cells += [str(m["errors"])] if errors else []
        rows.append([*cells, f"{m['avg_tools']:.2f}"])
    notes = ["Avg counts every row (unscorable rows, failed calls and missing replies are wrong)."]
    notes.append(
        "Official is the published scripts' figure (missing predictions skipped)."
        if official
        else "The published scripts' figure (missing predictions skipped) equals Avg on every row: not repeated."
    )
    if not errors:
        notes.append("No call failed.")
    warning = small_sample_warning(n)
    return ["", *([f"> **{warning}**", ""] if warning else []), *_table(head, rows), "", " ".join(notes)]


def gap_and_price(metrics: dict) -> list[str]:
    methods, lines = metrics["methods"], []
    none, best = methods.get("no_tool"), methods.get("oracle_subsets")
    if none and best and "policy" in methods and best["accuracy"] > none["accuracy"]:
        share = (methods["policy"]["accuracy"] - none["accuracy"]) / (best["accuracy"] - none["accuracy"])
        lines += ["", f"Share of the No-Tool → Oracle (all subsets) gap closed by the policy: **{100 * share:.1f} %**"]
    check = metrics.get("price_check") or {}
    if len(check) > 2:
        worth = ", ".join(f"{_name(metrics, k)} {v:+.3f}" for k, v in check.items() if k != "price")
        lines += ["", f"Expected reward per query at the run's price of {check['price']} a tool call: {worth}"]
    return lines


def unscorable(metrics: dict) -> list[str]:
    lines = []
    if metrics.get("unscorable"):
        lines += [
            "",
            f"{len(metrics['unscorable'])} unscorable rows (counted wrong): "
            + "; ".join(f"row {u['row']} ({u['id']}): {u['reason']}" for u in metrics["unscorable"][:10]),
        ]
    if metrics.get("tool_errors"):
        lines += ["", "Tool error records: " + ", ".join(f"{t} {c}" for t, c in metrics["tool_errors"].items())]
    return lines


def _by_domain(metrics: dict, field: str, title: str) -> list[str]:
    """One table per domain: a row per method, a column per ``field`` value (category) of that domain."""
    methods = metrics["methods"]
    groups = next((m[field] for m in methods.values() if m.get(field)), {})
    if len(groups) < 2:
        return []
    domains: dict[str, list[str]] = {}
    for key, entry in groups.items():
        domains.setdefault(" / ".join(entry.get("domains") or ["all"]), []).append(key)
    lines = ["", f"## By {title}, within each domain", "", "Accuracy in % (95 % interval); n under each name."]
    for domain, keys in sorted(domains.items()):
        head = [f"{domain.capitalize()}: method", *[f"{k} (n={groups[k]['n']})" for k in keys]]
        rows = [
            [
                _name(metrics, name),
                *[with_interval(m.get(field, {}).get(k, {}).get("accuracy"), groups[k]["n"]) for k in keys],
            ]
            for name, m in methods.items()
        ]
        lines += ["", *_table(head, rows)]
    return lines


def by_category(metrics: dict) -> list[str]:
    return _by_domain(metrics, "by_category", "category") + _by_domain(metrics, "by_subcategory", "sub-category")


def _against(metrics: dict, reference: str) -> list[str]:
    """One method per row against ``reference`` on the same items: the four counts and the difference in
    accuracy with its exact paired 95 % interval (:mod:`.paired`)."""
    key = f"vs_{reference}"
    rows = []
    for name, m in metrics["methods"].items():
        if key not in m:
            continue
        v = m[key]
        interval = v.get("interval_95")
        paired = (
            f"{100 * v['difference']:+.1f} [{100 * interval[0]:+.1f}, {100 * interval[1]:+.1f}]" if interval else "–"
        )
        rows.append(
            [_name(metrics, name), *(str(v[k]) for k in ("improved", "degraded", "both_correct", "both_wrong")), paired]
        )
    head = ["Method", "Improved", "Degraded", "Both correct", "Both wrong", "difference [paired 95 % interval]"]
    title = f"## Against {label(reference)}"
    note = "Points of accuracy, the same items; the interval is exact (McNemar's, over the items one alone gets right)."
    return ["", title, "", note, "", *_table(head, rows)] if rows else []


def against_no_tool(metrics: dict) -> list[str]:
    return _against(metrics, "no_tool")


def against_all_tools(metrics: dict) -> list[str]:
    return _against(metrics, "all_tools")


def tool_calls(metrics: dict) -> list[str]:
    methods = metrics["methods"]
    tools = metrics.get("tools") or sorted({t for m in methods.values() for t in m["tool_calls"]})
    rows = [[_name(metrics, name), *(str(m["tool_calls"].get(t, 0)) for t in tools)] for name, m in methods.items()]
    return ["", "## Tool calls", "", *_table(["Method", *tools], rows)]


def selection(metrics: dict) -> list[str]:
    chosen = {name: m["selection"] for name, m in metrics["methods"].items() if m.get("selection")}
    if not chosen:
        return []
    head = ["Method", "precision", "recall", "no call on hearing-answerable items"]
    rows = [
        [_name(metrics, name), _pct(s["precision"]), _pct(s["recall"]), _pct(s["no_call_share_on_hearing_items"])]
        for name, s in chosen.items()
    ]
    lines = ["", "## Selection against the generator's knowledge (meta.tools)", "", *_table(head, rows)]
    kinds = sorted({k for s in chosen.values() for k in s["per_kind"]})
    rows = [
        [
            kind,
            *(
                f"{_pct(c.get('precision'))} / {_pct(c.get('recall'))}"
                for c in (s["per_kind"].get(kind, {}) for s in chosen.values())
            ),
        ]
        for kind in kinds
    ]
    note = "Precision / recall per question kind (– where nothing was called or nothing is needed):"
    return [*lines, "", note, "", *_table(["kind", *(_name(metrics, n) for n in chosen)], rows)]


def _seconds(point: dict) -> str:
    spent = point.get("tool_seconds")
    return f"{spent['serial']:.2f} / {spent['parallel']:.2f}" if spent else "–"


def dial_curve(metrics: dict) -> list[str]:
    """report.md's section: the two curves as a table (accuracy in %, tools and tool-seconds per query, the
    gap with its paired interval)."""
    curve = metrics.get("cost_curve")
    if not curve:
        return []
    fixed = curve.get("fixed_order")
    head = ["K (--tools K)", "plugin's K most probable: acc", "tools", "tool-s one by one / side by side"]
    if fixed:
        head += ["fixed order: acc", "gap (plugin − fixed) [paired 95 %]"]
    rows = []
    for k, point in enumerate(curve["plugin"]):
        row = [str(point["k"]), f"{100 * point['accuracy']:.1f}", f"{point['avg_tools']:.2f}", _seconds(point)]
        if fixed:
            gap, intervals = fixed["gap"][k], fixed.get("gap_interval_95")
            shown = f"{100 * gap:+.1f}"
            if intervals:
                shown += f" [{100 * intervals[k][0]:+.1f}, {100 * intervals[k][1]:+.1f}]"
            row += [f"{100 * fixed['points'][k]['accuracy']:.1f}", shown]
        rows.append(row)
    if curve.get("threshold"):
        point = curve["threshold"]
        shipped = [
            "the plugin's default",
            f"{100 * point['accuracy']:.1f}",
            f"{point['avg_tools']:.2f}",
            _seconds(point),
        ]
        rows.append(shipped + ["", ""] * bool(fixed))
    lines = ["", "## Accuracy against tools (the dial)", ""]
    lines.append(
        "The plugin's K most probable tools per query (`--tools K`, the same selection) against the same K tools "
        "for every query"
        + (
            f", added in the order {', '.join(fixed['order'])} (average gain alone on {fixed['source']})."
            if fixed
            else "."
        )
    )
    lines.append(
        "The plugin's default is its certified point where `autagent adapt --certify` gave it one, else its trained "
        "threshold (a tool is called when its probability exceeds one half). Tool-seconds per query from each "
        "tool's seconds measured at export."
    )
    if not fixed:
        lines.append("No fixed order: the plugin records no tool values (exported before the dial).")
    lines.append("")
    return lines + _table(head, rows)


def timing(metrics: dict) -> list[str]:
    return phase_table(metrics["timings"]) if metrics.get("timings", {}).get("phases") else []  # make train's


def incomplete(metrics: dict) -> list[str]:
    """A warning first where more of the reasoner's calls failed than ``eval.max_failed_answers``."""
    found = metrics.get("incomplete")
    if not found:
        return []
    return [
        "",
        f"**Incomplete: {found['failed_answers']} of {found['calls']} reasoner calls failed "
        f"(last: {found.get('last_failure') or '?'}); a failed answer counts as wrong, so the figures below "
        "understate the methods that asked most.**",
    ]


SECTIONS: list[Callable[[dict], list[str]]] = [
    incomplete,
    headline,
    gap_and_price,
    unscorable,
    by_category,
    against_no_tool,
    against_all_tools,
    tool_calls,
    selection,
    dial_curve,
    timing,
]
"""report.md's sections after its title, in order: each a function of the metrics giving its lines
(none to leave it out)."""


def markdown_report(metrics: dict) -> str:
    title = f"# {metrics['dataset']}: {metrics['n']} questions, reasoner {reasoner_title(metrics['reasoner'])}"
    lines = [title]
    for section in SECTIONS:
        lines += section(metrics)
    return "\n".join(lines) + "\n"

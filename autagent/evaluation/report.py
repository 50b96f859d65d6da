"""Human-readable outputs: the paper's Table 2 layout in Markdown (with the official figure beside
ours), breakdowns by category and sub-category (MMAU) or modality (MMAR), the Improved/Degraded
breakdown, selection quality against the generator's knowledge, accuracy per method (Figure 2),
the tool-call distribution, and reward and tool calls over training (Figure 4)."""

from __future__ import annotations

import json
from pathlib import Path

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


def tool_label(tool: str) -> str:
    from tools.registry import get_tool

    try:
        return get_tool(tool).label
    except KeyError:
        return tool


def label(name: str) -> str:
    if name.startswith("single:"):
        return tool_label(name.split(":", 1)[1])
    return LABELS.get(name, name)


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _breakdown(methods: dict, field: str, title: str) -> list[str]:
    keys = sorted({k for m in methods.values() for k in m.get(field, {})})
    if len(keys) < 2:
        return []
    lines = [
        "",
        f"## By {title}",
        "",
        "| " + title + " | n | " + " | ".join(label(m) for m in methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for key in keys:
        n = next(m[field][key]["n"] for m in methods.values() if key in m.get(field, {}))
        cells = [_pct(m.get(field, {}).get(key, {}).get("accuracy")) for m in methods.values()]
        lines.append(f"| {key} | {n} | " + " | ".join(cells) + " |")
    return lines


def markdown_report(metrics: dict) -> str:
    methods = metrics["methods"]
    tools = metrics.get("tools") or sorted({t for m in methods.values() for t in m["tool_calls"]})
    domains = sorted({d for m in methods.values() for d in m["by_domain"]})
    head = ["Method", *[d.capitalize() for d in domains], "Avg", "Official", "Errors", "Avg tools"]
    lines = [
        f"# {metrics['dataset']}: reasoner {metrics['reasoner']} (n = {metrics['n']})",
        "",
        "Avg counts every row (unscorable rows, failed calls and missing replies are wrong); Official is the "
        "published scripts' figure (missing predictions skipped).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for name, m in methods.items():
        cells = [label(name)] + [_pct(m["by_domain"].get(d)) for d in domains]
        cells += [
            f"**{_pct(m['accuracy'])}**",
            _pct(m["official"]["accuracy"]),
            str(m["errors"]),
            f"{m['avg_tools']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    none, best = methods.get("no_tool"), methods.get("oracle_subsets")
    if none and best and "policy" in methods and best["accuracy"] > none["accuracy"]:
        share = (methods["policy"]["accuracy"] - none["accuracy"]) / (best["accuracy"] - none["accuracy"])
        lines += ["", f"Share of the No-Tool → Oracle (all subsets) gap closed by the policy: **{100 * share:.1f} %**"]
    check = metrics.get("price_check") or {}
    if len(check) > 2:
        worth = ", ".join(f"{label(k)} {v:+.3f}" for k, v in check.items() if k != "price")
        lines += ["", f"Expected reward per query at the run's price of {check['price']} a tool call: {worth}"]
    if metrics.get("unscorable"):
        lines += [
            "",
            f"{len(metrics['unscorable'])} unscorable rows (counted wrong): "
            + "; ".join(f"row {u['row']} ({u['id']}): {u['reason']}" for u in metrics["unscorable"][:10]),
        ]
    if metrics.get("tool_errors"):
        lines += ["", "Tool error records: " + ", ".join(f"{t} {c}" for t, c in metrics["tool_errors"].items())]
    lines += _breakdown(methods, "by_category", "category") + _breakdown(methods, "by_subcategory", "sub-category")
    lines += [
        "",
        "## Against No-Tool",
        "",
        "| Method | Improved | Degraded | Both correct | Both wrong |",
        "|---|---|---|---|---|",
    ]
    for name, m in methods.items():
        if "vs_no_tool" in m:
            v = m["vs_no_tool"]
            lines.append(
                f"| {label(name)} | {v['improved']} | {v['degraded']} | {v['both_correct']} | {v['both_wrong']} |"
            )
    lines += ["", "## Tool calls", "", "| Method | " + " | ".join(tools) + " |", "|---|" + "---|" * len(tools)]
    for name, m in methods.items():
        lines.append(f"| {label(name)} | " + " | ".join(str(m["tool_calls"].get(t, 0)) for t in tools) + " |")
    selection = {name: m["selection"] for name, m in methods.items() if m.get("selection")}
    if selection:
        lines += [
            "",
            "## Selection against the generator's knowledge (meta.tools)",
            "",
            "| Method | precision | recall | no call on hearing-answerable items |",
            "|---|---|---|---|",
        ]
        for name, s in selection.items():
            lines.append(
                f"| {label(name)} | {_pct(s['precision'])} | {_pct(s['recall'])} | "
                f"{_pct(s['no_call_share_on_hearing_items'])} |"
            )
        kinds = sorted({k for s in selection.values() for k in s["per_kind"]})
        lines += [
            "",
            "Precision / recall per question kind (– where nothing was called or nothing is needed):",
            "",
            "| kind | " + " | ".join(label(n) for n in selection) + " |",
            "|---|" + "---|" * len(selection),
        ]
        for kind in kinds:
            cells = [s["per_kind"].get(kind, {}) for s in selection.values()]
            lines.append(
                f"| {kind} | "
                + " | ".join(f"{_pct(c.get('precision'))} / {_pct(c.get('recall'))}" for c in cells)
                + " |"
            )
    if metrics.get("timings", {}).get("phases"):  # make train's phase table
        lines += phase_table(metrics["timings"])
    return "\n".join(lines) + "\n"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy(metrics: dict, path: Path) -> None:
    plt = _pyplot()
    names = list(metrics["methods"])
    values = [100 * metrics["methods"][n]["accuracy"] for n in names]
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(names)), 4))
    colors = ["tab:red" if n == "policy" else "tab:gray" if n.startswith("oracle") else "tab:blue" for n in names]
    ax.bar(range(len(names)), values, color=colors)
    ax.set_xticks(range(len(names)), [label(n) for n in names], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, max(values, default=0) * 1.1 + 1)  # room for the labels above the tallest bar
    ax.set_title(f"{metrics['dataset']} / {metrics['reasoner']}")
    for i, v in enumerate(values):
        ax.text(i, v + 0.5, f"{v:.1f}", ha="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_tool_calls(metrics: dict, path: Path) -> None:
    """Calls per tool for each selector, grouped by tool; the legend sits above the bars, never on them."""
    plt = _pyplot()
    tools = metrics.get("tools") or []
    names = [n for n in ("random", "all_tools", "tools_desc", "oracle_subsets", "policy") if n in metrics["methods"]]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        calls = metrics["methods"][name]["tool_calls"]
        ax.bar([i + k * width for i in range(len(tools))], [calls.get(t, 0) for t in tools], width, label=label(name))
    ax.set_xticks(
        [i + 0.4 - width / 2 for i in range(len(tools))],
        [tool_label(t) for t in tools],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    ax.set_ylabel(f"calls over {metrics.get('n', '?')} questions")
    if names:  # an evaluation of no-tool alone has no selector to draw
        ax.legend(fontsize=7, ncol=len(names), loc="lower center", bbox_to_anchor=(0.5, 1.01), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


TRAINING_CURVES = (  # (panel title, [(label, log keys tried in order)])
    ("reward", [("mean reward", ("reward_mean", "reward"))]),
    (
        "accuracy on the batch",
        [
            ("with the sampled tools", ("accuracy_sampled",)),
            ("without tools (y_base)", ("accuracy_no_tool",)),
            ("dev, greedy selection", ("dev_accuracy",)),
        ],
    ),
    ("tools called per query", [("sampled", ("avg_tools", "selection/avg_tools"))]),
    ("KL to the reference", [("KL", ("kl",))]),
)


def smooth(values: list[float], window: int) -> list[float]:
    """A trailing moving average (the first points average what there is)."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_training(log: Path, path: Path, tools) -> None:
    """Training at a glance (the paper's Figure 4): each curve smoothed over a faint trace of the raw
    per-step values (reward, accuracy with and without tools, tools called, KL), and the share of
    sampled subsets calling each tool as small multiples with one shared scale."""
    if not log.exists():
        return
    rows = [json.loads(line) for line in log.read_text().splitlines() if line]
    if not rows:
        return
    plt = _pyplot()
    panels = [
        (title, curves)
        for title, curves in TRAINING_CURVES
        if any(any(k in r for r in rows for k in keys) for _, keys in curves)
    ]
    tools = [t for t in tools if any(f"tool_share/{t}" in r for r in rows)]
    columns = 4
    tool_rows = -(-len(tools) // columns) if tools else 0
    fig = plt.figure(figsize=(11, 2.6 * (1 + tool_rows) + 0.4))
    grid = fig.add_gridspec(1 + tool_rows, columns)
    window = max(3, len(rows) // 15)
    for k, (title, curves) in enumerate(panels[:columns]):
        ax = fig.add_subplot(grid[0, k])
        for j, (name, keys) in enumerate(curves):
            points = [
                (r["step"], next(r[key] for key in keys if key in r))
                for r in rows
                if "step" in r and any(key in r for key in keys)
            ]
            if not points:
                continue
            steps, values = zip(*points)
            color = f"C{j}"
            if len(points) > window:
                ax.plot(steps, values, color=color, alpha=0.2, linewidth=0.8)
                ax.plot(steps, smooth(list(values), window), color=color, linewidth=1.8, label=name)
            else:
                ax.plot(steps, values, color=color, marker="o", linewidth=1.5, label=name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
        if len(curves) > 1:
            ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False, ncol=1)
    for i, tool in enumerate(tools):
        ax = fig.add_subplot(grid[1 + i // columns, i % columns])
        points = [(r["step"], r[f"tool_share/{tool}"]) for r in rows if f"tool_share/{tool}" in r]
        steps, values = zip(*points)
        ax.fill_between(steps, smooth(list(values), window), color="C2", alpha=0.35, linewidth=0)
        ax.plot(steps, smooth(list(values), window), color="C2", linewidth=1.5)
        ax.set_ylim(0, 1)
        ax.set_title(f"{tool_label(tool)}: share of subsets calling it", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(f"training ({len(rows)} logged steps; thick: moving average over {window} steps)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

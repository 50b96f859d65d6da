"""The plots a run writes beside report.md: accuracy per method with its 95 % interval (the paper's
Figure 2), calls per tool for each selector, and training at a glance (Figure 4) with every router of
an ensemble.  Each has a title a reader understands, axis labels and a legend for what its colours
and line styles mean."""

from __future__ import annotations

import json
from pathlib import Path

from .report import label, reasoner_title, tool_label, wilson


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


GROUPS = (  # (colour, legend) of a method's bar
    ("tab:red", "AuTAgent (the trained policy)"),
    ("tab:blue", "baselines"),
    ("tab:gray", "oracles (upper bounds, not deployable)"),
)


def _group(name: str) -> int:
    return 0 if name == "policy" else 2 if name.startswith("oracle") else 1


def plot_accuracy(metrics: dict, path: Path) -> None:
    _save(accuracy_figure(metrics), path, 120)


def _save(fig, path: Path, dpi: int) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    _pyplot().close(fig)


def accuracy_figure(metrics: dict):
    """A bar per method, its 95 % Wilson interval as an error bar, coloured by kind (legend above)."""
    from matplotlib.patches import Patch

    plt = _pyplot()
    names, n = list(metrics["methods"]), metrics["n"]
    values = [100 * metrics["methods"][m]["accuracy"] for m in names]
    bounds = [wilson(v / 100, n) for v in values]
    errors = [
        [v - 100 * lo for v, (lo, _) in zip(values, bounds)],
        [100 * hi - v for v, (_, hi) in zip(values, bounds)],
    ]
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(names)), 4.4))
    colors = [GROUPS[_group(m)][0] for m in names]
    ax.bar(range(len(names)), values, color=colors, yerr=errors, capsize=2, error_kw={"linewidth": 0.8})
    ax.set_xticks(
        range(len(names)),
        [(metrics.get("labels") or {}).get(m) or label(m) for m in names],
        rotation=45,
        ha="right",
        fontsize=8,
    )
    ax.set_ylabel("accuracy (%), with its 95 % interval")
    ax.set_ylim(0, 110)
    ax.set_yticks(range(0, 101, 20))
    for i, v in enumerate(values):  # the value above its interval's cap
        ax.text(i, v + errors[1][i] + 1.5, f"{v:.1f}", ha="center", fontsize=7)
    used = sorted({_group(m) for m in names})
    handles = [Patch(color=GROUPS[g][0], label=GROUPS[g][1]) for g in used]
    ax.legend(
        handles=handles, fontsize=7, ncol=len(handles), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False
    )
    ax.set_title(
        f"{metrics['dataset']}: {n} questions, reasoner {reasoner_title(metrics['reasoner'])}", fontsize=10, pad=22
    )
    ax.spines[["top", "right"]].set_visible(False)
    return fig


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
    ax.set_xlabel("tool")
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
ROUTER_STYLES = ("-", "--", ":", "-.")
"""Router m of an ensemble is drawn in ``ROUTER_STYLES[m % 4]``; its curves keep their colours."""


def smooth(values: list[float], window: int) -> list[float]:
    """A trailing moving average (the first points average what there is)."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def training_logs(log: Path) -> list[list[dict]]:
    """Each router's logged steps: ``log`` (router 0), then ``members/<m>/train_log.jsonl`` beside it."""
    logs, m = [], 0
    while True:
        path = log if m == 0 else log.parent / "members" / str(m) / log.name
        if not path.exists():
            return logs
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if rows:
            logs.append(rows)
        m += 1


def _curve(ax, rows: list[dict], keys, window: int, color: str, style: str, name: str | None) -> None:
    points = [
        (r["step"], next(r[k] for k in keys if k in r)) for r in rows if "step" in r and any(k in r for k in keys)
    ]
    if not points:
        return
    steps, values = zip(*points)
    if len(points) > window:
        if style == "-":  # the raw trace of the first router only: the others' would hide the curves
            ax.plot(steps, values, color=color, alpha=0.2, linewidth=0.8)
        ax.plot(steps, smooth(list(values), window), color=color, linestyle=style, linewidth=1.6, label=name)
    else:
        ax.plot(steps, values, color=color, linestyle=style, marker="o", linewidth=1.4, label=name)


def plot_training(log: Path, path: Path, tools) -> None:
    """Training at a glance (the paper's Figure 4) from ``log`` and its ensemble's ``members/``: each curve
    smoothed over a faint trace of the raw per-step values (reward, accuracy with and without tools,
    tools called, KL), and the share of sampled subsets calling each tool as small multiples with one
    shared scale; every router of an ensemble, one line style each."""
    logs = training_logs(Path(log))
    if logs:
        _save(training_figure(logs, tools), path, 110)


def training_figure(logs: list[list[dict]], tools):
    """:func:`plot_training`'s figure of each router's logged steps (router 0's first)."""
    plt = _pyplot()
    rows = logs[0]
    panels = [(t, c) for t, c in TRAINING_CURVES if any(any(k in r for r in rows for k in keys) for _, keys in c)]
    tools = [t for t in tools if any(f"tool_share/{t}" in r for r in rows)]
    columns = 4
    tool_rows = -(-len(tools) // columns) if tools else 0
    fig = plt.figure(figsize=(11, 2.8 * (1 + tool_rows) + 0.6))
    grid = fig.add_gridspec(1 + tool_rows, columns)
    window = max(3, len(rows) // 15)
    for k, (title, curves) in enumerate(panels[:columns]):
        ax = fig.add_subplot(grid[0, k])
        for m, router_rows in enumerate(logs):
            for j, (name, keys) in enumerate(curves):
                _curve(ax, router_rows, keys, window, f"C{j}", ROUTER_STYLES[m % 4], name if m == 0 else None)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
        if len(curves) > 1:
            ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False, ncol=1)
    for i, tool in enumerate(tools):
        ax = fig.add_subplot(grid[1 + i // columns, i % columns])
        for m, router_rows in enumerate(logs):
            _curve(ax, router_rows, (f"tool_share/{tool}",), window, "C2", ROUTER_STYLES[m % 4], None)
        ax.set_ylim(0, 1)
        ax.set_title(f"{tool_label(tool)}: share of subsets calling it", fontsize=8)
        ax.set_xlabel("step", fontsize=7)
        ax.set_ylabel("share", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(
        f"training: {len(rows)} steps of {len(logs)} router{'s' if len(logs) > 1 else ''}; thick: moving average "
        f"over {window} steps, faint: router 0's values at each step",
        fontsize=9,
        x=0.02,
        ha="left",
    )
    if len(logs) > 1:  # which line is which router (trained apart, selecting by their mean)
        from matplotlib.lines import Line2D

        styles = [
            Line2D([], [], color="black", linestyle=ROUTER_STYLES[m % 4], label=f"router {m}") for m in range(len(logs))
        ]
        fig.legend(handles=styles, loc="upper right", ncol=len(logs), fontsize=7, frameon=False)
    return fig


def plot_cost_curve(metrics: dict, path: Path) -> None:
    """Accuracy against tools per query: the plugin's top-K curve, the fixed order's, the threshold."""
    curve = metrics.get("cost_curve")
    if not curve:
        return
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [p["avg_tools"] for p in curve["plugin"]]
    ax.plot(xs, [100 * p["accuracy"] for p in curve["plugin"]], "o-", color="tab:red", label="plugin: K most probable")
    if curve.get("fixed_order"):
        points = curve["fixed_order"]["points"]
        ax.plot(
            [p["avg_tools"] for p in points],
            [100 * p["accuracy"] for p in points],
            "s--",
            color="tab:blue",
            label="fixed order (training queries' average value)",
        )
    if curve.get("threshold"):
        point = curve["threshold"]
        ax.plot([point["avg_tools"]], [100 * point["accuracy"]], "*", ms=14, color="black", label="plugin's threshold")
    ax.set_xlabel("tools called per query")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"Accuracy against tools ({metrics.get('n', '?')} questions)")
    ax.legend(fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    _save(fig, path, 120)

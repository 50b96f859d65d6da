"""The router's training at a glance (the paper's Figure 4), ``training.png`` beside its run: every router of
an ensemble, from their ``train_log.jsonl``; and the seconds each spent in its GRPO steps."""

from __future__ import annotations

import json
from pathlib import Path

from tools.registry import label_of


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, imported on first use: plots are drawn on cluster nodes with
    no display, and a run that draws none does not pay for matplotlib.  Evaluation's plots use it too."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


METHOD_COLOURS = {
    "policy": "#d62728",  # AuTAgent: red on every plot
    "no_tool": "#7f7f7f",
    "random": "#c7c7c7",
    "all_tools": "#1f77b4",
    "tools_desc": "#2ca02c",
    "single": "#aec7e8",  # each single tool (their bars are named)
    "agentic_only": "#9467bd",
    "agentic": "#ff9896",
    "oracle_single": "#ffbb78",
    "oracle_subsets": "#ff7f0e",
    "oracle_kind": "#8c564b",
    "oracle_labels": "#c49c94",
    "fixed_order": "#17becf",  # the cost curve's tools in one order for every query
    "dev": "#000000",  # the policy on dev (training plot)
}
"""One colour per method, the same on every plot (accuracy.png, tool_calls.png, cost_curve.png, training.png):
AuTAgent is red wherever it is drawn, No-Tool grey, All-Tools blue; the oracles take the orange-brown family."""


def method_colour(name: str) -> str:
    """:data:`METHOD_COLOURS`' colour of a method (``single:<tool>`` share one; an unknown name is dark grey)."""
    return METHOD_COLOURS.get("single" if name.startswith("single:") else name, "#444444")


TRAINING_CURVES = (
    ("reward", [("mean reward", ("reward_mean", "reward"), "policy")]),
    (
        "accuracy on the batch",
        [
            ("with the sampled tools", ("accuracy_sampled",), "policy"),
            ("without tools (y_base)", ("accuracy_no_tool",), "no_tool"),
            ("dev, greedy selection", ("dev_accuracy",), "dev"),
        ],
    ),
    ("tools called per query", [("sampled", ("avg_tools", "selection/avg_tools"), "policy")]),
    ("KL to the reference", [("KL", ("kl",), "policy")]),
)
"""(panel title, [(label, log keys tried in order, the method whose colour it takes)])."""
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
        fig = training_figure(logs, tools)
        fig.tight_layout()
        fig.savefig(path, dpi=110)


def training_figure(logs: list[list[dict]], tools):
    """:func:`plot_training`'s figure of each router's logged steps (router 0's first)."""
    plt = pyplot()
    rows = logs[0]
    panels = [(t, c) for t, c in TRAINING_CURVES if any(any(k in r for r in rows for k in keys) for _, keys, _ in c)]
    tools = [t for t in tools if any(f"tool_share/{t}" in r for r in rows)]
    columns = 4
    tool_rows = -(-len(tools) // columns) if tools else 0
    fig = plt.figure(figsize=(11, 2.8 * (1 + tool_rows) + 0.6))
    grid = fig.add_gridspec(1 + tool_rows, columns)
    window = max(3, len(rows) // 15)
    for k, (title, curves) in enumerate(panels[:columns]):
        ax = fig.add_subplot(grid[0, k])
        for m, router_rows in enumerate(logs):
            for name, keys, method in curves:
                colour = method_colour(method)
                _curve(ax, router_rows, keys, window, colour, ROUTER_STYLES[m % 4], name if m == 0 else None)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
        if len(curves) > 1:
            ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False, ncol=1)
    for i, tool in enumerate(tools):
        ax = fig.add_subplot(grid[1 + i // columns, i % columns])
        for m, router_rows in enumerate(logs):
            _curve(
                ax, router_rows, (f"tool_share/{tool}",), window, method_colour("policy"), ROUTER_STYLES[m % 4], None
            )
        ax.set_ylim(0, 1)
        ax.set_title(f"{label_of(tool)}: share of subsets calling it", fontsize=8)
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


def member_step_seconds(run_dir, members: int) -> list[float]:
    """Seconds of each router's GRPO steps (``step_seconds`` summed over its ``train_log.jsonl``:
    member 0 in the run folder, the others under ``members/``); empty where there is no such log."""
    out = []
    for m in range(members):
        log = Path(run_dir) / ("train_log.jsonl" if m == 0 else f"members/{m}/train_log.jsonl")
        try:
            rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            return []
        out.append(round(sum(r.get("step_seconds", 0.0) for r in rows), 1))
    return out

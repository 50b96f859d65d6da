"""The plots a run writes beside report.md: accuracy per method with its 95 % interval (the paper's
Figure 2), calls per tool for each selector and accuracy against tools per query (the router's training
plot is the router's own: :mod:`autagent.policies.router.plots`).  Each has a title a reader understands,
axis labels and a legend for what its colours and line styles mean."""

from __future__ import annotations

from pathlib import Path

from tools.registry import label_of

from ..policies.router.plots import method_colour, pyplot
from .report import label, reasoner_title, wilson

PLOT_LABELS = {
    "policy": "AuTAgent",
    "oracle_single": "Oracle: best single tool",
    "oracle_subsets": "Oracle: best tool set",
    "oracle_kind": "Oracle: one set per question type",
    "oracle_labels": "Oracle: answer-revealing tools",
}
"""Short plain names on a picture; the report's tables keep the precise ones (:data:`.report.LABELS`) and
:data:`ORACLE_CAPTION` says under the picture what the oracles are."""
ORACLE_CAPTION = (
    "Hatched: oracles, ceilings no selector can reach (each chooses knowing the answer): the best single tool or "
    "tool set for each question; one tool set per question type, chosen on this test set; the tools the "
    "benchmark marks as revealing each answer."
)
"""What the hatched bars are, in words, under every picture that draws one."""
ORACLE_LEGEND = "oracles (hatched): upper bounds, not deployable"


def plot_label(metrics: dict, name: str) -> str:
    """A method's name on a picture: :data:`PLOT_LABELS`' plain one, else the report's."""
    return PLOT_LABELS.get(name) or (metrics.get("labels") or {}).get(name) or label(name)


def _is_oracle(name: str) -> bool:
    return name.startswith("oracle")


def plot_accuracy(metrics: dict, path: Path) -> None:
    _save(accuracy_figure(metrics), path, 120)


def _save(fig, path: Path, dpi: int) -> None:
    fig.savefig(path, dpi=dpi)  # laid out by the figure's function (room for a caption)
    pyplot().close(fig)


def _caption(fig, text: str) -> None:
    """``text`` in small print under the axes (wrapped to the figure's width), room made for it."""
    import textwrap

    width = int(fig.get_figwidth() * 18)  # characters of 7-point text a line holds
    lines = textwrap.wrap(text, width)
    fig.tight_layout(rect=(0, 0.035 * len(lines) + 0.01, 1, 1))
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, color="#444444", ha="left", va="bottom")


def accuracy_figure(metrics: dict):
    """A bar per method, in its colour on every plot (:data:`METHOD_COLOURS`), its 95 % Wilson interval as an
    error bar; the oracles hatched and said in words under the axes."""
    from matplotlib.patches import Patch

    plt = pyplot()
    names, n = list(metrics["methods"]), metrics["n"]
    values = [100 * metrics["methods"][m]["accuracy"] for m in names]
    bounds = [wilson(v / 100, n) for v in values]
    errors = [
        [v - 100 * lo for v, (lo, _) in zip(values, bounds)],
        [100 * hi - v for v, (_, hi) in zip(values, bounds)],
    ]
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(names)), 4.8))
    bars = ax.bar(
        range(len(names)),
        values,
        color=[method_colour(m) for m in names],
        yerr=errors,
        capsize=2,
        error_kw={"linewidth": 0.8},
    )
    for bar, name in zip(bars, names):
        if _is_oracle(name):
            bar.set_hatch("//")
            bar.set_edgecolor("white")
    ax.set_xticks(range(len(names)), [plot_label(metrics, m) for m in names], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("accuracy (%), with its 95 % interval")
    ax.set_ylim(0, 110)
    ax.set_yticks(range(0, 101, 20))
    for i, v in enumerate(values):  # the value above its interval's cap
        ax.text(i, v + errors[1][i] + 1.5, f"{v:.1f}", ha="center", fontsize=7)
    handles = (
        [Patch(facecolor=method_colour("policy"), label="AuTAgent (the trained policy)")] if "policy" in names else []
    )
    if any(_is_oracle(m) for m in names):
        handles.append(Patch(facecolor="#bbbbbb", hatch="//", edgecolor="white", label=ORACLE_LEGEND))
    if handles:
        ax.legend(
            handles=handles, fontsize=7, ncol=len(handles), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False
        )
    title = f"{metrics['dataset']}: {n} questions, reasoner {reasoner_title(metrics['reasoner'])}"
    ax.set_title(title, fontsize=10, pad=22 if handles else 6)
    ax.spines[["top", "right"]].set_visible(False)
    if any(_is_oracle(m) for m in names):
        _caption(fig, ORACLE_CAPTION)
    else:
        fig.tight_layout()
    return fig


def plot_tool_calls(metrics: dict, path: Path) -> None:
    _save(tool_calls_figure(metrics), path, 120)


def tool_calls_figure(metrics: dict):
    """Calls per tool for each selector, grouped by tool, each in its colour on every plot; the legend sits
    above the bars, never on them."""
    plt = pyplot()
    tools = metrics.get("tools") or []
    names = [n for n in ("random", "all_tools", "tools_desc", "oracle_subsets", "policy") if n in metrics["methods"]]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        calls = metrics["methods"][name]["tool_calls"]
        ax.bar(
            [i + k * width for i in range(len(tools))],
            [calls.get(t, 0) for t in tools],
            width,
            label=plot_label(metrics, name),
            color=method_colour(name),
            hatch="//" if _is_oracle(name) else None,
            edgecolor="white" if _is_oracle(name) else None,
        )
    ax.set_xticks(
        [i + 0.4 - width / 2 for i in range(len(tools))],
        [label_of(t) for t in tools],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    ax.set_xlabel("tool")
    ax.set_ylabel(f"calls over {metrics.get('n', '?')} questions")
    if names:  # an evaluation of no-tool alone has no selector to draw
        ax.legend(fontsize=7, ncol=len(names), loc="lower center", bbox_to_anchor=(0.5, 1.01), frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    if any(_is_oracle(m) for m in names):
        _caption(fig, ORACLE_CAPTION)
    else:
        fig.tight_layout()
    return fig


COST_CURVE_CAPTION = (
    "Star: what the plugin calls by default, with no dial: each query's tools it scores above one half, a cut "
    "fixed when it was trained (or the point adapt --certify checked on held-out queries), never on this test "
    "set. The K points are measured on this test set: a K that looks best here was picked on the test itself; "
    "confirm it on other questions before shipping --tools K."
)
"""Why the default is the star even where a K point lies above it, under every cost curve."""


def plot_cost_curve(metrics: dict, path: Path) -> None:
    if metrics.get("cost_curve"):
        _save(cost_curve_figure(metrics), path, 120)


def cost_curve_figure(metrics: dict):
    """Accuracy against tools per query: the plugin's top-K curve (each point labelled K = k), the fixed
    order's, the default's star, and :data:`COST_CURVE_CAPTION` under the axes; beside it, where the points
    carry them, the same curves against tool-seconds per query (one by one: the sum of the tools' seconds
    measured at export), as FDB-v3 reports latency."""
    curve = metrics["cost_curve"]
    plt = pyplot()
    timed = all(p.get("tool_seconds") for p in curve["plugin"])
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(11.0 if timed else 6.4, 4.8), squeeze=False)
    axes_by_x = [(axes[0][0], lambda p: p["avg_tools"], "tools called per query")]
    if timed:
        axes_by_x.append((axes[0][1], lambda p: p["tool_seconds"]["serial"], "tool-seconds per query (one by one)"))
    for ax, x_of, xlabel in axes_by_x:
        xs = [x_of(p) for p in curve["plugin"]]
        ys = [100 * p["accuracy"] for p in curve["plugin"]]
        ax.plot(xs, ys, "o-", color=method_colour("policy"), label="AuTAgent: its K most probable tools")
        for point, x, y in zip(curve["plugin"], xs, ys):
            ax.annotate(f"K={point['k']}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        points = (curve.get("fixed_order") or {}).get("points") or []
        if points and all(p.get("tool_seconds") or xlabel.startswith("tools") for p in points):
            ax.plot(
                [x_of(p) for p in points],
                [100 * p["accuracy"] for p in points],
                "s--",
                color=method_colour("fixed_order"),
                label="the same K tools for every query (best on average first)",
            )
        point = curve.get("threshold")
        if point and (xlabel.startswith("tools") or point.get("tool_seconds")):
            ax.plot(
                [x_of(point)],
                [100 * point["accuracy"]],
                "*",
                ms=15,
                color=method_colour("policy"),
                markeredgecolor="black",
                label="AuTAgent's default (no dial)",
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel("accuracy (%)")
        ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_title(f"Accuracy against tools ({metrics.get('n', '?')} questions)")
    if timed:
        axes[0][1].set_title("and against the tools' seconds")
    axes[0][0].legend(fontsize=8, frameon=False)
    _caption(fig, COST_CURVE_CAPTION)
    return fig

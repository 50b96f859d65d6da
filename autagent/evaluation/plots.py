"""The plots a run writes beside report.md: accuracy per method with its 95 % interval (the paper's
Figure 2), calls per tool for each selector and accuracy against tools per query (the router's training
plot is the router's own: :mod:`autagent.policies.router.plots`).  Each has a title a reader understands,
axis labels and a legend for what its colours and line styles mean."""

from __future__ import annotations

from pathlib import Path

from tools.registry import label_of

from ..policies.router.plots import pyplot
from .report import label, reasoner_title, wilson

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
    pyplot().close(fig)


def accuracy_figure(metrics: dict):
    """A bar per method, its 95 % Wilson interval as an error bar, coloured by kind (legend above)."""
    from matplotlib.patches import Patch

    plt = pyplot()
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
    plt = pyplot()
    tools = metrics.get("tools") or []
    names = [n for n in ("random", "all_tools", "tools_desc", "oracle_subsets", "policy") if n in metrics["methods"]]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / max(len(names), 1)
    for k, name in enumerate(names):
        calls = metrics["methods"][name]["tool_calls"]
        ax.bar([i + k * width for i in range(len(tools))], [calls.get(t, 0) for t in tools], width, label=label(name))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_cost_curve(metrics: dict, path: Path) -> None:
    """Accuracy against tools per query: the plugin's top-K curve, the fixed order's, the threshold."""
    curve = metrics.get("cost_curve")
    if not curve:
        return
    plt = pyplot()
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

"""The pictures a run writes, read by someone who did not write the code (issue 63, item 9): one colour per
method on every plot, plain names on the picture with the oracles' meaning in words under it, and the cost
curve saying why its star, not the best-looking K, is the default."""

from __future__ import annotations

import json

import pytest
from matplotlib.colors import to_hex

from autagent.evaluation.plots import accuracy_figure, cost_curve_figure, tool_calls_figure
from autagent.evaluation.report import label
from autagent.policies.router.plots import method_colour, training_figure

TOOLS = ["asr", "tempo"]
SELECTORS = ("random", "all_tools", "tools_desc", "oracle_subsets", "policy")


def _metrics() -> dict:
    names = ("no_tool", *SELECTORS, "oracle_kind", "oracle_labels")
    methods = {
        name: {"accuracy": 0.3 + 0.05 * i, "avg_tools": 1.0, "tool_calls": {"asr": 3 + i, "tempo": 5}}
        for i, name in enumerate(names)
    }
    curve = {
        "plugin": [{"k": k, "accuracy": a, "avg_tools": k} for k, a in enumerate([0.3, 0.5, 0.6])],
        "threshold": {"accuracy": 0.45, "avg_tools": 1.1},
        "fixed_order": {"points": [{"k": k, "accuracy": a, "avg_tools": k} for k, a in enumerate([0.3, 0.4, 0.6])]},
    }
    return {
        "dataset": "test",
        "reasoner": "embedded:embedded",
        "n": 20,
        "tools": TOOLS,
        "methods": methods,
        "labels": {name: label(name) for name in methods},
        "cost_curve": curve,
    }


def _texts(fig) -> str:
    return " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_text())


def test_each_method_has_one_colour_on_every_plot():
    """accuracy.png drew AuTAgent red and tool_calls.png purple (and the oracle red): one palette now."""
    metrics = _metrics()
    accuracy = accuracy_figure(metrics).axes[0]
    bars = {name: to_hex(patch.get_facecolor()) for name, patch in zip(metrics["methods"], accuracy.patches)}
    calls = tool_calls_figure(metrics).axes[0]
    per_tool = len(TOOLS)
    for k, name in enumerate(SELECTORS):
        drawn = {to_hex(patch.get_facecolor()) for patch in calls.patches[k * per_tool : (k + 1) * per_tool]}
        assert drawn == {bars[name]} == {to_hex(method_colour(name))}, name
    assert len(set(bars.values())) == len(bars)  # no two methods share a colour
    curve = cost_curve_figure(metrics).axes[0]
    assert to_hex(curve.get_lines()[0].get_color()) == bars["policy"]
    logs = [[{"step": s, "accuracy_sampled": 0.5, "accuracy_no_tool": 0.3} for s in range(1, 4)]]
    panel = next(ax for ax in training_figure(logs, []).axes if ax.get_title() == "accuracy on the batch")
    drawn = {line.get_label(): to_hex(line.get_color()) for line in panel.get_lines()}
    assert drawn["with the sampled tools"] == bars["policy"] and drawn["without tools (y_base)"] == bars["no_tool"]


def test_pictures_name_the_oracles_plainly_and_say_what_they_are_under_the_axes():
    metrics = _metrics()
    for fig in (accuracy_figure(metrics), tool_calls_figure(metrics)):
        text = _texts(fig)
        assert "one subset per kind" not in text and "labelled tools" not in text  # the report's jargon
        assert "Oracle: best tool set" in text and "chosen on this test set" in text  # plain, and said in words
    ticks = [t.get_text() for t in accuracy_figure(metrics).axes[0].get_xticklabels()]
    assert "Oracle: one set per question type" in ticks and "AuTAgent" in ticks


def test_the_cost_curve_says_why_the_threshold_is_the_default_and_labels_each_k():
    fig = cost_curve_figure(_metrics())
    text = _texts(fig)
    assert all(f"K={k}" in text for k in range(3))  # K = 2 is above the star: which point is which K
    assert "AuTAgent's default (no dial)" in text
    assert "never on this test set" in text and "picked on the test itself" in text


def test_a_rendered_plot_is_a_png(tmp_path):
    from autagent.evaluation.plots import plot_cost_curve

    plot_cost_curve(_metrics(), tmp_path / "cost_curve.png")
    assert (tmp_path / "cost_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.dumps(_metrics())  # the metrics a report reads, unchanged by drawing


def test_the_cost_curve_reads_against_tool_seconds_beside_tools_where_the_points_carry_them():
    from autagent.evaluation.plots import cost_curve_figure

    seconds = lambda k: {"serial": 0.3 * k, "parallel": 0.2 * k}  # noqa: E731
    plugin = [{"k": k, "accuracy": 0.3 + 0.02 * k, "avg_tools": float(k), "tool_seconds": seconds(k)} for k in range(4)]
    figure = cost_curve_figure({"cost_curve": {"plugin": plugin}, "n": 10})
    axes = [ax for ax in figure.axes if ax.get_xlabel()]
    assert [ax.get_xlabel() for ax in axes] == ["tools called per query", "tool-seconds per query (one by one)"]
    assert list(axes[1].lines[0].get_xdata()) == pytest.approx([0.0, 0.3, 0.6, 0.9])
    untimed = [{k: v for k, v in p.items() if k != "tool_seconds"} for p in plugin]
    assert len([ax for ax in cost_curve_figure({"cost_curve": {"plugin": untimed}}).axes if ax.get_xlabel()]) == 1

"""report.md, the plots and the model card, as a reader sees them: every accuracy with its 95 % Wilson
interval and a warning under 100 questions, columns only where they say something, categories within
their domain, wall and worker time apart, a legend for every colour, every router drawn, the report's
names in the model card."""

from __future__ import annotations

import json

import pytest

from autagent.evaluation.phases import table as phase_table
from autagent.evaluation.plots import accuracy_figure
from autagent.evaluation.report import label, markdown_report, wilson
from autagent.plugin.card import evaluation_table
from autagent.policies.router.plots import training_figure, training_logs


def _method(accuracy, official=None, errors=0, categories=None):
    categories = categories or {"tempo": ("music", accuracy), "chords": ("music", accuracy), "who": ("speech", 0.5)}
    return {
        "accuracy": accuracy,
        "interval_95": list(wilson(accuracy, 20)),
        "n": 20,
        "official": {"accuracy": accuracy if official is None else official, "n": 20, "skipped": 0},
        "errors": errors,
        "by_domain": {"music": accuracy, "speech": 0.5},
        "by_domain_n": {"music": 12, "speech": 8},
        "by_category": {
            k: {"accuracy": a, "n": 6 if d == "music" else 8, "domains": [d]} for k, (d, a) in categories.items()
        },
        "avg_tools": 1.0,
        "tool_calls": {"asr": 3},
    }


def _metrics(**methods):
    return {
        "dataset": "test",
        "reasoner": "embedded:embedded",
        "n": 20,
        "tools": ["asr"],
        "methods": methods,
        "labels": {name: label(name) for name in methods},
    }


def test_wilson_matches_the_textbook_values():
    assert wilson(0.5, 20) == pytest.approx((0.2993, 0.7007), abs=1e-4)
    assert wilson(0.0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)  # sound at the edges
    assert wilson(1.0, 10)[1] == 1.0


def test_the_report_gives_intervals_warns_on_small_samples_and_shows_columns_that_differ():
    report = markdown_report(_metrics(no_tool=_method(0.55), policy=_method(0.75)))
    assert report.startswith("# test: 20 questions, reasoner embedded\n")  # not "embedded:embedded"
    assert "Small sample: 20 questions (< 100)" in report
    assert "| AuTAgent (trained policy) | 75.0 (47–91) | 50.0 (22–78) | **75.0 (53–89)** | 1.00 |" in report
    assert "Music (n=12)" in report and "Official" not in report.split("\n\n")[2] and "Errors" not in report
    assert "equals Avg on every row" in report and "No call failed" in report
    differing = markdown_report(_metrics(no_tool=_method(0.55, official=0.6, errors=2), policy=_method(0.75)))
    assert "| Official | Errors |" in differing and "| 60.0 | 2 |" in differing
    large = _metrics(no_tool=_method(0.55))
    large["n"] = 100
    assert "Small sample" not in markdown_report(large)


def test_categories_are_tabled_within_their_domain_one_column_each():
    report = markdown_report(_metrics(no_tool=_method(0.5), policy=_method(0.75)))
    music = next(part for part in report.split("\n\n") if part.startswith("| Music: method"))
    speech = next(part for part in report.split("\n\n") if part.startswith("| Speech: method"))
    assert music.splitlines()[0] == "| Music: method | tempo (n=6) | chords (n=6) |"
    assert speech.splitlines()[0] == "| Speech: method | who (n=8) |"
    assert "| AuTAgent (trained policy) | 75.0 (36–94) | 75.0 (36–94) |" in music


def test_the_sections_are_a_list_a_new_one_joins():
    from autagent.evaluation import report as module

    module.SECTIONS.append(lambda metrics: ["", "## Accuracy against tools"])
    try:
        assert markdown_report(_metrics(no_tool=_method(0.5))).rstrip().endswith("## Accuracy against tools")
    finally:
        module.SECTIONS.pop()


def test_where_the_time_went_tells_wall_from_worker_time():
    timings = {
        "phases": {"tool records": 484.4, "training": 10.0, "total": 500.0},
        "tools": {"asr": {"busy_s": 931.3, "last_s": 480.0}},
        "ray_start_s": 4.2,
    }
    text = "\n".join(phase_table(timings))
    assert "| phase | wall (s) | worker (s) | done at (s) |" in text
    assert "| tool records | 484.4 | | |" in text and "| · Ray start | 4.2 | | |" in text
    assert "| · asr's calls | | 931.3 | 480.0 |" in text  # more than the phase: worker time, said so
    assert "summed over its clips and replicas" in text


def test_the_accuracy_plot_has_a_legend_for_each_colour_and_an_interval_per_bar():
    fig = accuracy_figure(_metrics(no_tool=_method(0.5), oracle_subsets=_method(0.9), policy=_method(0.75)))
    ax = fig.axes[0]
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    # each method has its colour (one palette on every plot: tests/test_ux_plots.py); the legend names the two
    # that need saying, and the hatching marks the oracles
    assert legend == ["AuTAgent (the trained policy)", "oracles (hatched): upper bounds, not deployable"]
    from matplotlib.container import ErrorbarContainer

    intervals = next(c for c in ax.containers if isinstance(c, ErrorbarContainer))
    assert len(intervals.lines[2][0].get_segments()) == 3  # an interval on every bar
    assert "reasoner embedded" in ax.get_title() and "95 % interval" in ax.get_ylabel()


def test_the_training_plot_draws_every_router_and_labels_every_axis(tmp_path):
    rows = [{"step": s, "reward_mean": 0.1 * s, "tool_share/asr": 0.5, "kl": 0.01} for s in range(1, 11)]
    (tmp_path / "members" / "1").mkdir(parents=True)
    (tmp_path / "members" / "2").mkdir(parents=True)
    for path in ("train_log.jsonl", "members/1/train_log.jsonl", "members/2/train_log.jsonl"):
        (tmp_path / path).write_text("\n".join(json.dumps(r) for r in rows))
    logs = training_logs(tmp_path / "train_log.jsonl")
    assert len(logs) == 3
    fig = training_figure(logs, ["asr"])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["router 0", "router 1", "router 2"]
    reward, share = fig.axes[0], fig.axes[-1]
    assert len([line for line in reward.get_lines() if line.get_linewidth() > 1]) == 3  # one curve per router
    assert all(ax.get_xlabel() == "step" for ax in fig.axes) and share.get_ylabel() == "share"


def test_the_model_card_uses_the_reports_names_and_intervals():
    card = "\n".join(evaluation_table(_metrics(no_tool=_method(0.55), policy=_method(0.75))))
    assert "| AuTAgent (trained policy) | 75.0 | 53.1–88.8 | 1.00 |" in card and "| No-Tool |" in card
    assert "| policy |" not in card and "| no_tool |" not in card
    assert "Small sample (20 < 100 questions)" in card and "reasoner `embedded`" in card

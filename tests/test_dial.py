"""The accuracy-for-cost dial: ``--tools K`` calls exactly the K most probable tools (the curve's points, by the
same function), ``--max-tools K`` never calls more than K of the threshold's, a latency budget is honoured with
the seconds the plugin records, bad values are one line, and an eval's report carries the accuracy-against-tools
curve beside the fixed order's, each gap with its paired interval."""

from __future__ import annotations

import json

import pytest
import torch

from autagent import api
from autagent.cli import main
from autagent.evaluation.cost_curve import cost_curve, fixed_order
from autagent.evaluation.summary import MethodResult
from autagent.plugin.dial import Dial, DialError, dialled, tool_seconds_of
from autagent.plugin.manifest import PluginTarget
from autagent.policies.router.costs import tool_seconds, tool_values
from autagent.policies.router.export import RouterParts, export_router
from autagent.policies.router.features import Featurizer
from autagent.policies.router.model import Router, RouterConfig

SEVEN = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers")
SECONDS = {"asr": 0.9, "emotion": 0.05, "chords": 0.4, "tempo": 0.1, "pitch": 0.2, "sound_events": 0.3, "speakers": 0.6}
VALUES = {
    "asr": 0.2,
    "emotion": 0.0,
    "chords": -0.01,
    "tempo": 0.05,
    "pitch": 0.01,
    "sound_events": 0.1,
    "speakers": 0.0,
}


def _probs(*rows):
    """Probabilities per query in SEVEN's order, and the threshold's 0/1 selections from them."""
    probs = torch.tensor(rows)
    return (probs > 0.5).float(), probs


# asr 0.9, tempo 0.8, emotion 0.7 are called at the threshold on query 0; chords on query 1; nothing on query 2
THRESHOLD = _probs(
    [0.9, 0.7, 0.2, 0.8, 0.1, 0.3, 0.05],
    [0.1, 0.2, 0.6, 0.1, 0.3, 0.45, 0.2],
    [0.4, 0.3, 0.2, 0.1, 0.35, 0.05, 0.01],
)


def test_max_tools_and_the_latency_budget_cut_the_thresholds_tools_most_probable_first():
    chosen, probs = THRESHOLD
    cut = lambda dial: dialled(chosen, probs, list(SEVEN), dial, SECONDS)  # noqa: E731
    assert cut(None) == [("asr", "emotion", "tempo"), ("chords",), ()]
    assert cut(Dial(max_tools=1)) == [("asr",), ("chords",), ()]
    assert cut(Dial(max_tools=0)) == [(), (), ()]
    # 200 ms: asr (900 ms) does not fit, tempo (100) and emotion (50) do; the output keeps the tools' order
    assert cut(Dial(latency_budget_ms=200)) == [("emotion", "tempo"), (), ()]


def test_tools_k_calls_exactly_the_k_most_probable_whatever_the_threshold():
    chosen, probs = THRESHOLD
    exact = lambda k: dialled(chosen, probs, list(SEVEN), Dial(tools=k), SECONDS)  # noqa: E731
    assert exact(1) == [("asr",), ("chords",), ("asr",)]  # query 2: nothing at the threshold, its best tool here
    assert exact(2) == [("asr", "tempo"), ("chords", "sound_events"), ("asr", "pitch")]
    assert exact(0) == [(), (), ()] and all(len(z) == 7 for z in exact(7))
    # ties go to the earlier tool
    tied = torch.full((1, 7), 0.5)
    assert dialled((tied > 0.5).float(), tied, list(SEVEN), Dial(tools=2), SECONDS) == [("asr", "emotion")]
    # with a latency budget the K most probable that fit: query 0's asr (900 ms) does not fit 300 ms
    assert dialled(chosen, probs, list(SEVEN), Dial(tools=3, latency_budget_ms=300), SECONDS)[0] == ("emotion", "tempo")


def test_tool_seconds_of_a_selection_sum_one_by_one_and_take_the_slowest_side_by_side():
    assert tool_seconds_of([("asr", "tempo"), ()], SECONDS) == {"serial": 0.5, "parallel": 0.45}
    assert tool_seconds_of([("asr",)], {}) is None


@pytest.mark.parametrize("kwargs", [{"max_tools": -1}, {"max_tools": 1.5}, {"latency_budget_ms": -3.0}, {"tools": -1}])
def test_a_bad_dial_is_refused(kwargs):
    with pytest.raises(DialError):
        Dial(**kwargs)


def test_a_latency_budget_without_recorded_seconds_names_the_tools():
    chosen, probs = THRESHOLD
    with pytest.raises(DialError, match=r"\['asr', 'emotion', 'tempo'\]"):
        dialled(chosen[:1], probs[:1], list(SEVEN), Dial(latency_budget_ms=100), {})


class _StubPlugin:
    """A router plugin's selection surface with fixed probabilities (the dial goes through :func:`dialled`)."""

    def __init__(self, probs, values):
        self.probs, self.tools, self.dial = probs, list(SEVEN), None
        self.manifest = {"tool_values": values, "tool_values_source": "a test's numbers", "tool_seconds": SECONDS}

    def select_many(self, samples):
        probs = self.probs[: len(samples)]
        return dialled((probs > 0.5).float(), probs, self.tools, self.dial, SECONDS)


def test_the_curve_ranks_by_probability_orders_the_fixed_tools_best_first_and_gaps_learned_minus_fixed():
    """Each query is right exactly when its subset is asr alone.  The plugin ranks asr first on every query
    and the recorded values rank chords best, asr worst: learned K = 1 is right everywhere, fixed K = 1
    (chords) nowhere, so the gap at K = 1 is +1 with a paired interval above 0.  A reversed ranking, a
    fixed order added worst first, or a gap of fixed − learned each change these numbers."""
    n = 12
    probs = torch.tensor([[0.9, 0.4, 0.2, 0.6, 0.1, 0.3, 0.05]] * n)
    values = {
        "asr": -0.2,
        "emotion": 0.0,
        "chords": 0.3,
        "tempo": 0.1,
        "pitch": 0.0,
        "sound_events": 0.05,
        "speakers": 0,
    }
    plugin = _StubPlugin(probs, values)

    def run(subsets):
        right = [tuple(z) == ("asr",) for z in subsets]
        return MethodResult(list(subsets), ["x"] * len(subsets), right, [None] * len(subsets))

    block = {"policy": {"accuracy": 0.0, "avg_tools": 2.0}}
    curve = cost_curve(plugin, list(range(n)), run, SEVEN, block)
    assert [p["accuracy"] for p in curve["plugin"][:3]] == [0.0, 1.0, 0.0]
    assert curve["plugin"][1]["tool_seconds"] == {"serial": 0.9, "parallel": 0.9}
    fixed = curve["fixed_order"]
    assert fixed["order"][:2] == ["chords", "tempo"] and fixed["order"][-1] == "asr"
    assert [p["accuracy"] for p in fixed["points"]] == [0.0] * 8
    assert fixed["gap"][1] == 1.0 and fixed["gap"][0] == 0.0
    low, high = fixed["gap_interval_95"][1]
    assert 0.45 < low < 0.5 and high == 1.0  # 12 of 12 discordant pairs favour the plugin: 2·0.025^(1/12) − 1
    assert plugin.dial is None  # the curve puts the plugin's own dial back
    assert fixed_order(plugin.manifest, SEVEN)[0] == [
        "chords",
        "tempo",
        "sound_events",
        "emotion",
        "pitch",
        "speakers",
        "asr",
    ]


def test_tool_values_are_each_tools_gain_alone_over_no_tool_from_the_table():
    from autagent.policies.router.costs import tool_values

    class Table:  # query 0: right with asr alone only; query 1: right with nothing and with anything
        items = ["q0", "q1"]

        def correct_matrix(self, items, subsets):
            assert subsets[0] == () and subsets[1:] == [(t,) for t in SEVEN]
            return [[0] + [t == "asr" for t in SEVEN], [1] * 8]

    values, source = tool_values(SEVEN, [], Table())
    assert values["asr"] == 0.5 and all(values[t] == 0.0 for t in SEVEN if t != "asr")
    assert source == "2 training queries (the answer table)"


class _Pool:
    clips = {"asr": 4, "tempo": 2}
    seconds = {"asr": 2.0, "tempo": 0.3}


def test_tool_seconds_come_from_the_runs_own_calls_else_the_warm_start():
    got = tool_seconds(_Pool(), ("asr", "tempo", "pitch", "chords"), inherited={"pitch": 0.07})
    assert got == {"asr": 0.5, "tempo": 0.15, "pitch": 0.07}


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    """A tiny router that calls most tools at its threshold, with recorded seconds and values."""
    torch.manual_seed(2)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(), len(SEVEN))
    with torch.no_grad():
        router.net[-1].bias.copy_(torch.tensor([4.0, 3.0, 2.0, 3.5, 2.5, 1.5, -4.0]))
    return export_router(
        PluginTarget(tmp_path_factory.mktemp("dial") / "plugin", SEVEN, "embedded", {}, 30.0, {"name": "dial"}, {}),
        RouterParts(router, featurizer, tool_seconds=SECONDS, tool_values=VALUES, values_source="a test's numbers"),
    )


def test_the_plugin_records_seconds_and_values_and_max_tools_never_exceeds_k(plugin_dir, tiny_bench):
    manifest = json.loads((plugin_dir / "manifest.json").read_text())
    assert manifest["tool_seconds"] == SECONDS and manifest["tool_values"] == VALUES
    plugin = api.load(plugin_dir)
    samples = tiny_bench["test"]
    undialled = plugin.select_many(samples)
    assert max(len(z) for z in undialled) >= 4
    for k in range(len(SEVEN) + 1):
        plugin.dial = Dial(max_tools=k)
        for chosen, full in zip(plugin.select_many(samples), undialled):
            assert len(chosen) <= k and set(chosen) <= set(full)
    for budget in (0, 120, 500, 1500):
        plugin.dial = Dial(latency_budget_ms=budget)
        for chosen, full in zip(plugin.select_many(samples), undialled):
            assert sum(SECONDS[t] for t in chosen) <= budget / 1000 + 1e-9 and set(chosen) <= set(full)
    plugin.dial = Dial(latency_budget_ms=1000)
    assert any(len(z) >= 2 for z in plugin.select_many(samples))  # the budget cuts, it does not silence


def test_select_on_the_command_line_takes_the_dial(plugin_dir, speech_wav, capsys):
    argv = ["select", "--plugin", str(plugin_dir), "--audio", str(speech_wav[0]), "--question", "Who speaks?"]
    assert main(argv) == 0
    assert len(json.loads(capsys.readouterr().out)["tools"]) >= 4
    assert main([*argv, "--max-tools", "2"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tools"]) == 2
    assert main([*argv, "--latency-budget-ms", "160"]) == 0
    assert json.loads(capsys.readouterr().out)["tools"] == ["emotion", "tempo"]
    assert main([*argv, "--max-tools", "-2"]) == 2
    assert capsys.readouterr().err.strip() == "autagent: error: max_tools must be >= 0, got -2"


def test_tool_values_are_each_tools_gain_alone_on_training_queries(tiny_bench, tmp_path):
    from autagent.reasoners import ReasonerConfig, build_reasoner

    reasoner = build_reasoner(ReasonerConfig(), str(tmp_path / "answers"), 30.0)
    values, source = tool_values(SEVEN, tiny_bench["train"][:12], None, reasoner, tiny_bench["records"])
    assert set(values) == set(SEVEN) and source == "12 training queries"
    assert all(-1.0 <= v <= 1.0 for v in values.values()) and any(v != 0 for v in values.values())


def test_eval_with_max_tools_calls_at_most_k_and_reports_the_curve(plugin_dir, tiny_bench, tmp_path):
    import yaml

    config = {
        "name": "dial",
        "output_dir": str(tmp_path / "runs"),
        "answer_cache_dir": str(tmp_path / "answers"),
        "data": {"test": str(tiny_bench["paths"]["test"])},
        "tools": {"executor": "local", "cache_dir": str(tiny_bench["cache"])},
        "eval": {"methods": ["no_tool", "all_tools", "policy"]},
        "logging": {"wandb": False, "progress": False},
    }
    path = tmp_path / "dial.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "eval"
    argv = ["eval", "--config", str(path), "--plugin", str(plugin_dir), "--out", str(out), "--max-tools", "1"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    policy = [r for r in rows if r["method"] == "policy"]
    assert policy and max(len(r["tools"]) for r in policy) == 1
    metrics = json.loads((out / "metrics.json").read_text())
    curve = metrics["cost_curve"]
    assert [p["k"] for p in curve["plugin"]] == list(range(8))
    assert [p["avg_tools"] for p in curve["plugin"]] == [float(k) for k in range(8)]
    assert curve["plugin"][0]["accuracy"] == pytest.approx(metrics["methods"]["no_tool"]["accuracy"], abs=1e-4)
    assert curve["plugin"][7]["accuracy"] == pytest.approx(metrics["methods"]["all_tools"]["accuracy"], abs=1e-4)
    assert curve["fixed_order"]["order"][:2] == ["asr", "sound_events"]
    assert curve["threshold"]["avg_tools"] == metrics["methods"]["policy"]["avg_tools"] <= 1
    report = (out / "report.md").read_text()
    assert "## Accuracy against tools (the dial)" in report and (out / "cost_curve.png").is_file()


def test_a_sweep_summarises_the_seeds_curves_per_k_with_the_gap_paired_by_seed():
    from autagent.recipes.sweep import curve_summary

    def curve(plugin, fixed):
        return {
            "plugin": [{"k": k, "accuracy": a} for k, a in enumerate(plugin)],
            "fixed_order": {
                "order": ["asr"],
                "points": [{"accuracy": a} for a in fixed],
                "gap": [p - f for p, f in zip(plugin, fixed)],
            },
            "threshold": {"accuracy": plugin[-1], "avg_tools": 1.0},
        }

    got = curve_summary([curve([0.2, 0.5], [0.2, 0.4]), curve([0.2, 0.7], [0.2, 0.4])])
    assert got["plugin"][1]["mean"] == pytest.approx(0.6) and got["fixed_order"][1]["std"] == 0
    assert got["gap"][1]["values"] == pytest.approx([0.1, 0.3]) and got["threshold"]["avg_tools"]["mean"] == 1.0


def test_a_recorded_sweep_names_each_point_of_its_curves_for_the_tables():
    from autagent.evaluation.tables import curve_entries

    mean = lambda *v: {"values": list(v)}  # noqa: E731
    curve = {"plugin": [mean(0.2, 0.2), mean(0.5, 0.6)], "fixed_order": [mean(0.2, 0.2), mean(0.4, 0.4)]}
    curve |= {"gap": [mean(0, 0), mean(0.1, 0.2)], "threshold": {"accuracy": mean(0.5, 0.5), "avg_tools": mean(1, 2)}}
    got = curve_entries("adapted", curve)
    assert got["adapted@K=1"] == {"label": "adapted@K=1", "accuracy": {"values": [0.5, 0.6]}, "avg_tools": 1}
    assert got["adapted@fixed@K=1"]["accuracy"]["values"] == [0.4, 0.4] and "adapted@gap@K=0" in got
    assert got["adapted@threshold"]["avg_tools"] == {"values": [1, 2]} and curve_entries("x", None) == {}


def test_a_plugin_without_recorded_values_gets_its_fixed_order_from_training_queries_at_eval(tiny_bench, tmp_path):
    import yaml

    torch.manual_seed(3)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(), len(SEVEN))
    target = PluginTarget(tmp_path / "old", SEVEN, "embedded", {}, 30.0, {"name": "old"}, {})
    old = export_router(target, RouterParts(router, featurizer))  # exported before the dial: no tool values
    config = {
        "name": "old",
        "output_dir": str(tmp_path / "runs"),
        "answer_cache_dir": str(tmp_path / "answers"),
        "data": {"train": str(tiny_bench["paths"]["train"]), "test": str(tiny_bench["paths"]["test"])},
        "tools": {"executor": "local", "cache_dir": str(tiny_bench["cache"])},
        "eval": {"methods": ["no_tool", "policy"], "curve_train_queries": 10, "plots": False},
        "logging": {"wandb": False, "progress": False},
    }
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["eval", "--config", str(path), "--plugin", str(old), "--out", str(tmp_path / "eval")]) == 0
    fixed = json.loads((tmp_path / "eval" / "metrics.json").read_text())["cost_curve"]["fixed_order"]
    assert fixed["source"] == "10 training queries" and sorted(fixed["order"]) == sorted(SEVEN)


def test_the_python_api_and_the_services_flags_take_the_dial(plugin_dir, speech_wav):
    import argparse

    from autagent.serve.options import ServeOptions, add_flags, from_args

    plugin = api.Plugin.load(plugin_dir)
    assert len(plugin.select(speech_wav[0], "Who speaks?")) >= 4
    assert len(plugin.set_dial(max_tools=1).select(speech_wav[0], "Who speaks?")) == 1
    with pytest.raises(DialError):
        plugin.set_dial(latency_budget_ms=-1)
    parser = argparse.ArgumentParser()
    add_flags(parser, ServeOptions)
    options = from_args(parser.parse_args(["--max-tools", "2", "--latency-budget-ms", "150.5"]))
    assert (options.max_tools, options.latency_budget_ms) == (2, 150.5)
    options = from_args(parser.parse_args(["--tools", "3", "--uncertified"]))
    assert (options.tools, options.uncertified) == (3, True)
    assert len(plugin.set_dial(tools=2).select(speech_wav[0], "Who speaks?")) == 2

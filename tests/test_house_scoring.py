"""A training run's evaluation is scored with what the run holds (issue 64): ``recipes.evaluate.score`` loads,
builds and computes nothing beside the answers (``autagent eval`` prepares what it needs in ``run_eval``), and
the benchmark's digest is read once, with the splits, for metrics.json."""

from __future__ import annotations

import json

import pytest

from autagent.config import load_config


def test_scoring_loads_no_split_no_plugin_no_records_and_builds_no_reasoner(tiny_bench, tmp_path, monkeypatch):
    import autagent.recipes.evaluate as evaluate
    from autagent.reasoners import build_reasoner

    config = load_config(
        None,
        {
            "answer_cache_dir": str(tmp_path / "answers"),
            "tools.cache_dir": str(tiny_bench["cache"]),
            "tools.executor": "local",
            "eval.methods": ["no_tool", "all_tools"],
            "eval.plots": False,
        },
    )
    reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)

    def prepared(*args, **kwargs):
        raise AssertionError("a scoring prepared what it was handed")

    for name in ("load_splits", "tool_records", "build_reasoner", "load", "read_manifest"):
        monkeypatch.setattr(evaluate, name, prepared)
    samples = tiny_bench["test"][:6]
    records = {s.id: tiny_bench["records"][s.id] for s in samples}
    held = evaluate.Held(samples, records, "tiny", reasoner, data_digest="abc")
    try:
        metrics = evaluate.score(config, tmp_path / "eval", held)
    finally:
        reasoner.close()
    assert set(metrics["methods"]) == {"no_tool", "all_tools"} and metrics["methods"]["no_tool"]["n"] == 6
    assert metrics["data_digest"] == "abc" and "plugin" not in metrics  # the run's digest, handed; no plugin
    rows = (tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()
    assert len(rows) == 12 and {json.loads(r)["method"] for r in rows} == {"no_tool", "all_tools"}


@pytest.mark.parametrize("embedded", [True, False])
def test_the_splits_carry_the_digest_a_run_records(embedded, tiny_bench, monkeypatch):
    import autagent.recipes.run as run

    data = tiny_bench["root"] / "data"
    if embedded:  # the tiny benchmark as the embedded one, its folder already generated
        overrides = {"data.benchmark.root": str(data), "data.limit_train": 2, "data.limit_test": 2}
        monkeypatch.setattr(
            run, "generate", lambda benchmark, progress: {k: data / f"{k}.json" for k in ("train", "test")}
        )
    else:
        overrides = {"data.train": str(data / "train.json"), "data.test": str(data / "test.json"), "data.limit_test": 2}
    config = load_config(None, {**overrides, "data.limit_train": 2})
    splits = run.load_splits(config)
    assert len(splits.test) == 2
    if embedded:
        assert splits.digest == run.data_digest(config) == json.loads((data / "digest.json").read_text())["sha256"]
    else:
        assert splits.digest is None and run.data_digest(config) is None  # dataset files: not the project's

"""An evaluation whose reasoner failed more than a few calls says so on its last line, exits 1 and marks its
figures (it once finished with accuracy 12.5 and exit 0 against a server that timed out on 25 of 40 answers)."""

from __future__ import annotations

import json

import yaml

from autagent.cli import main


def test_an_eval_against_a_server_that_is_down_exits_1_and_marks_its_figures(tiny_bench, tmp_path, capsys):
    config = {
        "name": "down",
        "output_dir": str(tmp_path / "runs"),
        "answer_cache_dir": str(tmp_path / "answers"),
        "data": {"test": str(tiny_bench["paths"]["test"])},
        "tools": {"executor": "local", "cache_dir": str(tiny_bench["cache"])},
        "reasoner": {
            "kind": "openai",
            "openai": {"base_url": "http://127.0.0.1:9/v1", "max_retries": 0, "timeout_s": 2},
        },
        "eval": {"methods": ["no_tool"], "plots": False},
        "logging": {"wandb": False, "progress": False},
    }
    path = tmp_path / "down.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "eval"
    assert main(["eval", "--config", str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    n = len(tiny_bench["test"])
    assert err[-1].startswith(f"autagent: error: {n} of {n} reasoner calls failed (last: ")
    assert "marked incomplete" in err[-1]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["incomplete"]["failed_answers"] == n
    assert (out / "report.md").read_text().splitlines()[2].startswith(f"**Incomplete: {n} of {n} reasoner calls failed")
    config["eval"]["max_failed_answers"] = n  # a user who accepts them: exit 0, nothing marked
    path.write_text(yaml.safe_dump(config))
    assert main(["eval", "--config", str(path), "--out", str(tmp_path / "again")]) == 0
    assert "incomplete" not in json.loads((tmp_path / "again" / "metrics.json").read_text())

"""The main job end to end through the CLI on a tiny benchmark: train, resume, eval, select, answer."""
from __future__ import annotations

import json

import pytest
import yaml

from autagent.cli import main


@pytest.fixture()
def tiny_config(tiny_bench, tmp_path):
    config = {
        "name": "tiny", "output_dir": str(tmp_path / "runs"), "answer_cache_dir": str(tmp_path / "answers"),
        "data": {"train": str(tiny_bench["paths"]["train"]), "dev": str(tiny_bench["paths"]["test"]),
                 "test": str(tiny_bench["paths"]["test"])},
        "tools": {"executor": "local", "cache_dir": str(tiny_bench["cache"])},
        "reasoner": {"embedded": {"attention_temperature": 0.3, "hearing_weight": 2.0}},
        "grpo": {"steps": 4, "batch_size": 8, "learning_rate": 0.01},
        "logging": {"wandb": False, "progress": False},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, tmp_path / "runs" / "tiny"


def test_train_then_resume_then_eval_select_answer(tiny_config, tiny_bench, tmp_path, capsys):
    config, run_dir = tiny_config
    assert main(["train", "--config", str(config)]) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    expected = {"no_tool", "random", "all_tools", "tools_desc", "oracle_single", "oracle_subsets", "policy",
                *[f"single:{t}" for t in ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")]}
    assert set(metrics["methods"]) == expected and metrics["n"] == len(tiny_bench["test"])
    for method in metrics["methods"].values():
        assert set(method) >= {"accuracy", "by_domain", "avg_tools", "tool_calls", "n"}
    best = metrics["methods"]["oracle_subsets"]["accuracy"]
    assert all(m["accuracy"] <= best + 1e-9 for m in metrics["methods"].values())
    assert metrics["methods"]["oracle_single"]["accuracy"] <= best
    assert metrics["training"]["reasoner_calls"] < metrics["training"]["naive_reasoner_calls"]
    for name in ("config.yaml", "report.md", "predictions.jsonl", "accuracy.png", "tool_calls.png", "training.png",
                 "plugin/manifest.json", "plugin/model.safetensors"):
        assert (run_dir / name).exists(), name
    assert "| No-Tool |" in (run_dir / "report.md").read_text()

    # a second fresh start is refused; --resume continues to the new step count
    assert main(["train", "--config", str(config)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["train", "--config", str(config), "--resume", "--set", "grpo.steps=6"]) == 0
    steps = [json.loads(line)["step"] for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]

    out = tmp_path / "eval"
    assert main(["eval", "--config", str(config), "--dataset", str(tiny_bench["paths"]["test"]), "--plugin",
                 str(run_dir / "plugin"), "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["methods"]["policy"]["n"] == len(tiny_bench["test"])

    sample = tiny_bench["test"][0]
    capsys.readouterr()
    assert main(["answer", "--config", str(config), "--plugin", str(run_dir / "plugin"), "--audio", sample.audio,
                 "--question", sample.question, "--choices", *sample.choices]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert reply["answer"] in sample.choices and len(reply["records"]) == len(reply["tools"])


def test_config_errors_name_file_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grpo: {lr: 0.1}\n")
    assert main(["train", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "unknown field grpo.lr" in err


def test_tools_run_prints_records(click_wav, tmp_path, capsys):
    assert main(["tools", "run", str(click_wav[0]), "--tools", "tempo,pitch", "--executor", "local", "--set",
                 f"tools.cache_dir={tmp_path}"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["tool"] for r in records] == ["tempo", "pitch"] and abs(records[0]["output"]["bpm"] - 120) < 3


def test_every_experiment_config_loads():
    import glob

    from autagent.config import load_config
    from autagent.policies.lm import lm_config

    paths = sorted(glob.glob("experiments/*.yaml"))
    assert len(paths) >= 8
    for path in paths:
        config = load_config(path)
        if config.policy.kind == "lm":
            lm_config(config)  # the LM section is checked field by field too
    paper = load_config("experiments/paper_qwen2audio.yaml")
    lm = lm_config(paper)
    assert (paper.grpo.steps, lm.learning_rate, paper.grpo.group_size, paper.grpo.temperature,
            lm.per_device_train_batch_size) == (200, 1e-6, 6, 1.0, 8)
    per_update = lm.per_device_train_batch_size * paper.launcher.num_processes * lm.gradient_accumulation_steps
    assert per_update % paper.grpo.group_size == 0  # TRL needs whole groups


def test_accelerate_relaunch_command(monkeypatch):
    from autagent.cli import accelerate_command
    from autagent.config import load_config

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("ACCELERATE_LAUNCHED", raising=False)
    paper = load_config("experiments/paper_qwen2audio.yaml")
    command = accelerate_command(paper, ["train", "--config", "experiments/paper_qwen2audio.yaml"])
    assert command[1:3] == ["-m", "accelerate.commands.launch"]
    assert command[3:7] == ["--config_file", "experiments/accelerate/zero2.yaml", "--num_processes", "8"]
    assert command[7:] == ["-m", "autagent.cli", "train", "--config", "experiments/paper_qwen2audio.yaml"]
    assert accelerate_command(load_config("experiments/embedded_main.yaml"), ["train"]) is None
    monkeypatch.setenv("LOCAL_RANK", "0")  # already launched: run in place
    assert accelerate_command(paper, ["train"]) is None

"""The LM agent policy on TRL with a tiny random Qwen2-Audio built here: output parsing, the
answer grammar, an end-to-end run (train, resume, plugin), and learning toward a rewarded list."""
from __future__ import annotations

import json

import pytest
import yaml

from autagent.policies.lm import AnswerGrammar, agent_prompt, parse_selection


@pytest.mark.parametrize("text, tools, valid", [
    ("<answer>1,4</answer>", ("asr", "tempo"), True),
    ("I need tempo. <answer> 4 </answer>", ("tempo",), True),
    ("<answer>4,1</answer>", ("asr", "tempo"), True),
    ("<answer></answer>", (), True),
    ("", (), False),
    ("tempo please", (), False),
    ("<answer>7</answer>", (), False),
    ("<answer>0</answer>", (), False),
    ("<answer>2,2</answer>", (), False),
    ("<answer>two</answer>", (), False),
    ("<answer>1</answer><answer>2</answer>", (), False),
    ("<answer>1,</answer>", (), False),
])
def test_parse_selection(text, tools, valid):
    selection = parse_selection(text)
    assert selection.tools == tools and selection.valid is valid
    assert bool(selection.reason) is (not valid)


def test_grammar_prefixes():
    ok = ["", "<ans", "<answer>", "<answer>1", "<answer>1,", "<answer>1,3</", "<answer></answer>", "<answer>6</answer>"]
    bad = ["x", "<answer>7", "<answer>1,1", "<answer>,", "<answer>1,,", "<answer>1,</answer>", "<answer>12"]
    assert all(AnswerGrammar.is_prefix(t) for t in ok)
    assert not any(AnswerGrammar.is_prefix(t) for t in bad)


def test_agent_prompt_anonymises_tools():
    prompt = agent_prompt("What is the tempo?")
    assert "(A) type1:" in prompt and "(F) type6:" in prompt and "asr" not in prompt.lower().split("tempo?")[0]
    assert "<answer>" in prompt and "What is the tempo?" in prompt


@pytest.fixture(scope="module")
def tiny_lm_config(tiny_bench, tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    config = yaml.safe_load(open("experiments/tiny_lm.yaml"))
    config.update({"output_dir": str(root / "runs"), "answer_cache_dir": str(root / "answers")})
    config["data"] = {"train": str(tiny_bench["paths"]["train"]), "test": str(tiny_bench["paths"]["test"]),
                      "limit_train": 8, "limit_test": 4}
    config["tools"] = {"executor": "local", "cache_dir": str(tiny_bench["cache"])}
    config["policy"]["lm"].update({"model_id": str(root / "tiny-qwen2-audio"), "save_steps": 1})
    config["grpo"]["steps"] = 2
    config["logging"] = {"wandb": False, "progress": False}
    path = root / "tiny_lm.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, root / "runs" / config["name"]


def test_tiny_lm_trains_resumes_and_exports_a_plugin(tiny_lm_config, tiny_bench, capsys):
    from autagent.cli import main

    config, run_dir = tiny_lm_config
    assert main(["train", "--config", str(config)]) == 0
    assert sorted(p.name for p in (run_dir / "trainer").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    log = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all("selection/invalid_share" in row for row in log)
    # An untrained model writes junk: the completions are parsed safely, scored invalid_reward and counted.
    assert all(row["reward"] == -1.0 and row["selection/invalid_share"] == 1.0 for row in log)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["methods"]["policy"]["n"] == 4 and metrics["training"]["invalid_reasons"]

    assert main(["train", "--config", str(config), "--resume", "--set", "grpo.steps=3"]) == 0
    log = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in log] == [1, 2, 3]

    manifest = json.loads((run_dir / "plugin" / "manifest.json").read_text())
    assert manifest["policy"] == "lm" and "model.safetensors" in manifest["files"]
    sample = tiny_bench["test"][0]
    capsys.readouterr()
    assert main(["select", "--plugin", str(run_dir / "plugin"), "--audio", sample.audio, "--question", sample.question]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert set(reply["tools"]) <= {"asr", "emotion", "chords", "tempo", "pitch", "sound_events"}


def test_lm_policy_learns_a_rewarded_index_list(tiny_bench, tmp_path):
    import torch

    from autagent.config import load_config
    from autagent.policies.lm import build_grpo_trainer, completion_logprob, parse_selection
    from autagent.tiny import build_tiny_qwen2_audio

    torch.manual_seed(0)
    model_dir = build_tiny_qwen2_audio(tmp_path / "model", seed=0)
    config = load_config("experiments/tiny_lm.yaml", {
        "grpo.steps": 30, "grpo.group_size": 4, "grpo.beta": 0.0, "policy.lm.model_id": str(model_dir),
        "policy.lm.constrained_decoding": True, "policy.lm.learning_rate": 3e-3, "policy.lm.max_completion_length": 12,
        "policy.lm.save_steps": 1000, "logging.wandb": False, "logging.progress": False})
    samples = tiny_bench["train"][:4]

    def rewards_tempo_alone(prompts, completions, **_):
        return [1.0 if parse_selection(c).tools == ("tempo",) else 0.0 for c in completions]

    trainer, processor = build_grpo_trainer(config, samples, {s.id: None for s in samples}, [rewards_tempo_alone],
                                            tmp_path / "out")
    probe = samples[0]
    before = completion_logprob(trainer.model, processor, probe.question, probe.audio, "<answer>4</answer>")
    trainer.train()
    after = completion_logprob(trainer.model, processor, probe.question, probe.audio, "<answer>4</answer>")
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    assert after > before + 1.0, (before, after)
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5

"""The LM agent policy on TRL with a tiny random Qwen2-Audio built here: the tolerant parser, the
answer grammar and its log-probabilities, the advantage estimator inside TRL, an end-to-end run
(train, resume, plugin), and learning toward a rewarded list."""
from __future__ import annotations

import json

import pytest
import torch
import yaml

from autagent.policies.lm.prompt import AnswerGrammar, agent_prompt, parse_selection

SIX = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")


@pytest.mark.parametrize("text, tools, valid", [
    ("<answer>1,4</answer>", ("asr", "tempo"), True),
    ("I need tempo. <answer> 4 </answer>", ("tempo",), True),
    ("<answer>4,1</answer>", ("asr", "tempo"), True),
    ("<answer>A,C</answer>", ("asr", "chords"), True),
    ("<answer>type1, TYPE3</answer>", ("asr", "chords"), True),
    ("<Answer>1 4</Answer>", ("asr", "tempo"), True),
    ("<answer>none</answer>", (), True),
    ("<answer></answer>", (), True),
    ("<answer>2,2</answer>", ("emotion",), True),
    ("<answer>1</answer> on second thought <answer>5</answer>", ("pitch",), True),
    ("", (), False),
    ("tempo please", (), False),
    ("<answer>7</answer>", (), False),
    ("<answer>0</answer>", (), False),
    ("<answer>G</answer>", (), False),
    ("<answer>two</answer>", (), False),
])
def test_parse_selection(text, tools, valid):
    selection = parse_selection(text, SIX)
    assert selection.tools == tools and selection.valid is valid
    assert bool(selection.reason) is (not valid)


class _CharTokenizer:
    """A tokenizer of single characters (plus EOS), enough to drive the grammar."""

    def __init__(self):
        self.vocab = list("<answer>/,0123456789xyz ") + ["<eos>"]
        self.eos_token_id = len(self.vocab) - 1

    def __len__(self):
        return len(self.vocab)

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.vocab[i] for i in ids if i != self.eos_token_id)


def test_grammar_prefixes_and_allowed_sets():
    grammar = AnswerGrammar(_CharTokenizer(), 0, 12)
    ok = ["", "<ans", "<answer>", "<answer>1", "<answer>1,", "<answer>1,3</", "<answer></answer>", "<answer>12</answer>",
          "<answer>11,2"]
    bad = ["x", "<answer>13", "<answer>1,1,", "<answer>,", "<answer>1,,", "<answer>1,</answer>", "<answer>0"]
    assert all(grammar.is_prefix(t) for t in ok) and not any(grammar.is_prefix(t) for t in bad)
    tok = _CharTokenizer()
    done = [tok.vocab.index(c) for c in "<answer>3</answer>"]
    assert grammar.allowed(done) == [tok.eos_token_id]
    assert tok.vocab.index("x") not in grammar.allowed([])


def test_masked_logprobs_are_the_distribution_sampling_used():
    from autagent.policies.lm.rollout import grammar_allowed, masked_logps

    tok = _CharTokenizer()
    grammar = AnswerGrammar(tok, 0, 6)
    completion = [tok.vocab.index(c) for c in "<answer>2</answer>"] + [tok.eos_token_id]
    torch.manual_seed(0)
    logits = torch.randn(1, len(completion), len(tok))
    index, valid = grammar_allowed(grammar, [completion], len(completion))
    logp, entropy = masked_logps(logits, torch.tensor([completion]), index, valid, temperature=0.7)
    for j in range(len(completion)):
        allowed = grammar.allowed(completion[:j])
        expected = torch.log_softmax(logits[0, j, allowed] / 0.7, dim=-1)[allowed.index(completion[j])]
        assert torch.allclose(logp[0, j], expected, atol=1e-5)
    assert (entropy >= 0).all()
    assert logp[0, 0] > torch.log_softmax(logits[0, 0] / 0.7, -1)[completion[0]]  # the mask raises what it allows
    bad = torch.tensor([[tok.vocab.index("x")] + completion[1:]])
    assert torch.isinf(masked_logps(logits, bad, index, valid, 0.7)[0][0, 0])  # a token the grammar forbids


def test_agent_prompt_anonymises_the_runs_tools():
    prompt = agent_prompt("What is the tempo?", SIX + ("speakers",))
    assert "(A) type1:" in prompt and "(G) type7:" in prompt and "asr" not in prompt.lower().split("tempo?")[0]
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
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["methods"]["policy"]["n"] == 4

    assert main(["train", "--config", str(config), "--resume", "--set", "grpo.steps=3"]) == 0
    log = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in log] == [1, 2, 3]

    manifest = json.loads((run_dir / "plugin" / "manifest.json").read_text())
    assert manifest["policy"] == "lm" and "model.safetensors" in manifest["files"]
    sample = tiny_bench["test"][0]
    capsys.readouterr()
    assert main(["select", "--plugin", str(run_dir / "plugin"), "--audio", sample.audio, "--question", sample.question]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert set(reply["tools"]) <= set(SIX)


def _trainer(tiny_bench, tmp_path, reward_fn, **overrides):
    from autagent.config import load_config
    from autagent.policies.lm.recipe import lm_config
    from autagent.policies.lm.trainer import build_grpo_trainer
    from autagent.tiny import build_tiny_qwen2_audio

    torch.manual_seed(0)
    model_dir = build_tiny_qwen2_audio(tmp_path / "model", seed=0)
    config = load_config("experiments/tiny_lm.yaml", {
        "grpo.group_size": 4, "grpo.beta": 0.0, "policy.lm.model_id": str(model_dir),
        "policy.lm.constrained_decoding": True, "policy.lm.learning_rate": 3e-3, "policy.lm.max_completion_length": 12,
        "policy.lm.save_steps": 1000, "logging.wandb": False, "logging.progress": False, **overrides})
    samples = tiny_bench["train"][:4]
    trainer, processor = build_grpo_trainer(config, lm_config(config), samples, {s.id: None for s in samples}, [reward_fn],
                                            tmp_path / "out", SIX, str(model_dir))
    return trainer, processor, samples


def test_trl_gets_our_advantage_estimator_and_loss(tiny_bench, tmp_path):
    seen = []

    def reward_is_length(prompts, completions, **_):
        rewards = [float(len(parse_selection(c, SIX).tools)) for c in completions]
        seen.append(rewards)
        return rewards

    trainer, _, _ = _trainer(tiny_bench, tmp_path, reward_is_length, **{"grpo.steps": 1, "grpo.advantage": "reward"})
    captured = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        captured.append(output["advantages"].clone())
        return output

    trainer._generate_and_score_completions = spy
    trainer.train()
    assert trainer.args.loss_type == "grpo" and trainer.advantage_kind == "reward"
    assert torch.allclose(captured[0].float().cpu(), torch.tensor(seen[0][:len(captured[0])]))  # A = r, no group mean


def test_lm_policy_learns_a_rewarded_index_list(tiny_bench, tmp_path):
    from autagent.policies.lm.rollout import completion_logprob

    def rewards_tempo_alone(prompts, completions, **_):
        return [1.0 if parse_selection(c, SIX).tools == ("tempo",) else 0.0 for c in completions]

    trainer, processor, samples = _trainer(tiny_bench, tmp_path, rewards_tempo_alone, **{"grpo.steps": 30,
                                                                                        "grpo.advantage": "group"})
    probe, grammar = samples[0], trainer.grammar
    prompt = agent_prompt(probe.question, SIX)
    before = completion_logprob(trainer.model, processor, prompt, probe.audio, "<answer>4</answer>", grammar=grammar)
    trainer.train()
    after = completion_logprob(trainer.model, processor, prompt, probe.audio, "<answer>4</answer>", grammar=grammar)
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    assert after > before + 1.0, (before, after)
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5

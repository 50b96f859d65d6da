"""The LM policy's test trainer: TRL's GRPO trainer on a tiny random Qwen2-Audio, four training items and
the six tools, with a reward the test chooses."""

from __future__ import annotations

import torch

SIX = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")


class CharTokenizer:
    """A tokenizer of single characters (plus EOS), enough to drive the grammar."""

    def __init__(self):
        self.vocab = list("<answer>/,0123456789xyz ") + ["<eos>"]
        self.eos_token_id = len(self.vocab) - 1

    def __len__(self):
        return len(self.vocab)

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.vocab[i] for i in ids if i != self.eos_token_id)

    def ids(self, text: str) -> list[int]:
        return [self.vocab.index(c) for c in text]


def grpo_trainer(tiny_bench, tmp_path, reward_fn, **overrides):
    """The trainer, its processor and its four samples (``overrides``: run config fields)."""
    from autagent.config import load_config
    from autagent.policies.lm.recipe import build_tiny_policy
    from autagent.policies.lm.trainer import build_grpo_trainer

    torch.manual_seed(0)
    model_dir = build_tiny_policy(tmp_path / "model", seed=0)
    config = load_config(
        "experiments/tiny_lm.yaml",
        {
            "grpo.group_size": 4,
            "grpo.beta": 0.0,
            "policy.lm.model_id": str(model_dir),
            "policy.lm.constrained_decoding": True,
            "policy.lm.learning_rate": 3e-3,
            "policy.lm.max_completion_length": 12,
            "policy.lm.save_steps": 1000,
            "logging.wandb": False,
            "logging.progress": False,
            **overrides,
        },
    )
    samples = tiny_bench["train"][:4]
    trainer, processor = build_grpo_trainer(
        config,
        config.policy.lm,
        samples,
        {s.id: None for s in samples},
        [reward_fn],
        tmp_path / "out",
        SIX,
        str(model_dir),
    )
    trainer.autagent_config = config
    return trainer, processor, samples


def silent_reward(prompts, completions, **_):
    """Every completion rewarded 0: for tests of what the trainer does, not of what it learns."""
    return [0.0] * len(completions)

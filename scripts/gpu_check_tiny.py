"""``make gpu-check``'s checks on the tiny model (:mod:`gpu_check`): rollout protection under gradient
checkpointing (greedy completions sampled in the trainer's training state equal those in eval mode) and
bf16 learning (at lr 1e-6, bf16 over fp32 masters moves the weights as far as fp32 does; on the
rewarded-index task the rewarded completion's log-probability rises)."""

from __future__ import annotations

import os
from pathlib import Path

SIX = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")
"""The tools the runs select among (the paper's six)."""


def tiny_checks(trainer, processor, samples, config, work: Path) -> dict:
    """Rollout protection under gradient checkpointing, and bf16 learning (tiny model)."""
    import dataclasses

    import torch

    from autagent.policies.lm.prompt import agent_prompt, parse_selection
    from autagent.policies.lm.rollout import completion_logprob, make_rollout
    from autagent.policies.lm.trainer import build_grpo_trainer

    model = trainer.accelerator.unwrap_model(trainer.model)
    lm = dataclasses.replace(config.policy.lm, max_completion_length=8)
    trainer._audio_paths = [s.audio for s in samples]
    prompts = [agent_prompt(s.question, SIX) for s in samples]
    rollout = make_rollout(processor, dataclasses.replace(lm, constrained_decoding=False), len(SIX))
    trainer.temperature = 1e-4  # all but greedy: CUDA sampling is not bit-repeatable
    model.activation_checkpointing_enable()
    model.train()
    in_training = rollout(prompts, trainer)["completion_ids"]
    model.activation_checkpointing_disable()
    model.eval()
    protected = in_training == rollout(prompts, trainer)["completion_ids"]

    def moved(bf16: bool) -> float:
        overrides = dataclasses.replace(config.policy.lm, bf16=bf16, learning_rate=1e-6, lora=None, deepspeed=None)
        trained = build_grpo_trainer(
            dataclasses.replace(config, policy=dataclasses.replace(config.policy, lm=overrides)),
            overrides,
            samples,
            {s.id: None for s in samples},
            [lambda prompts, completions, **_: [1.0 + len(c) % 3 for c in completions]],
            work / f"moved{bf16}",
            SIX,
            overrides.model_id,
        )[0]
        before = [p.detach().float().clone() for p in trained.model.parameters()]
        trained.train()
        return float(
            torch.cat(
                [(master(trained, p) - b.to(p.device)).flatten() for p, b in zip(trained.model.parameters(), before)]
            ).norm()
        )

    fp32, bf16 = moved(False), moved(True)
    rewarded = lambda prompts, completions, **_: [
        float(parse_selection(c, SIX).tools == ("tempo",)) for c in completions
    ]  # noqa: E731
    lm = dataclasses.replace(
        config.policy.lm,
        learning_rate=3e-3,
        constrained_decoding=True,
        max_completion_length=12,
        lora=None,
        deepspeed=None,
    )
    steps = int(os.environ.get("GPU_CHECK_LEARNING_STEPS", "30"))
    learning_config = dataclasses.replace(
        config,
        policy=dataclasses.replace(config.policy, lm=lm),
        grpo=dataclasses.replace(config.grpo, steps=steps, advantage="group", beta=0.0),
    )
    learner, _ = build_grpo_trainer(
        learning_config, lm, samples, {s.id: None for s in samples}, [rewarded], work / "learning", SIX, lm.model_id
    )
    ask = lambda: completion_logprob(
        learner.model,
        processor,
        prompts[0],
        samples[0].audio,
        "<answer>4</answer>",  # noqa: E731
        grammar=learner.grammar,
    )
    before = ask()
    learner.train()
    return {
        "rollout_protected": protected,
        "moved_fp32": fp32,
        "moved_bf16": bf16,
        "bf16_moves_like_fp32": abs(bf16 / fp32 - 1) <= 0.2 if fp32 else False,
        "rewarded_logprob": [round(before, 3), round(ask(), 3)],
        "learning_steps": steps,
    }


def master(trainer, param):
    """The weight AdamW updates: DeepSpeed's fp32 master of a bf16 parameter (an update below bf16's
    resolution moves the master, not yet the bf16 copy), else the parameter itself."""
    if trainer.is_deepspeed_enabled:
        from deepspeed.utils import safe_get_full_fp32_param

        full = safe_get_full_fp32_param(param)
        if full is not None:
            return full.detach().float()
    return param.detach().float()

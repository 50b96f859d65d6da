"""The LM policy's step of the shared recipe (:mod:`autagent.recipes.train`): y_base, TRL GRPO, plugin."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ...reasoners.prompts import BASELINE, WITH_TOOLS
from ...testing.tiny_models import build_tiny_chat_tokenizer, build_tiny_qwen2_audio, tiny_corpus
from .. import export_target
from .config import LMPolicyConfig
from .plugin import draft_lm
from .prompt import AGENT_PROMPT
from .reward import ToolSelectionReward
from .text import TEXT_AGENT_PROMPT, resolve_model
from .trainer import build_grpo_trainer


def build_tiny_policy(directory: Path, seed: int = 0) -> Path:
    """A tiny random Qwen2-Audio whose tokenizer knows the agent's and the reasoner's prompts."""
    return build_tiny_qwen2_audio(directory, seed, prompts=(BASELINE, WITH_TOOLS, AGENT_PROMPT))


def build_tiny_text_policy(directory: Path, seed: int = 0, width: int = 32, prompts=()) -> Path:
    """A tiny random Llama (two layers, GQA) whose tokenizer knows the text policy's prompt template and
    ``prompts`` (so they are short in its tokens): for tests and plumbing runs of ``modality: text`` (no
    download, no conversion)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = build_tiny_chat_tokenizer(tiny_corpus((TEXT_AGENT_PROMPT, *prompts)), vocab_size=600)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Path(directory)


def ensure_model(lm: LMPolicyConfig) -> str:
    if lm.text and lm.build_tiny:
        if not (Path(lm.model_id) / "config.json").exists():
            build_tiny_text_policy(Path(lm.model_id))
        return lm.model_id
    if lm.text:
        return resolve_model(lm)  # a GGUF (or the package holding one) converted once
    path = Path(lm.model_id)
    if lm.build_tiny and not (path / "config.json").exists():
        build_tiny_policy(path)
    return lm.model_id


def baseline_answers(reasoner, samples, state) -> dict:
    """y_base for every training query, asked once by rank 0 and broadcast to the other ranks (every
    rank needs it for its rewards; asking on each would repeat the whole no-tool pass per rank)."""
    base = None
    if state.is_main_process:
        base = dict(zip([s.id for s in samples], reasoner.answer_many([(s, None) for s in samples])))
        reasoner.check_health()
    if state.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        base = broadcast_object_list([base], from_process=0)[0]
    return base


def train(ctx, resume: bool = False):
    """Train with TRL on every rank; rank 0 makes the plugin in memory.  Returns (plugin folder, summary,
    draft): on rank 0 the :class:`~.plugin.LMDraft` holds the trained model, so evaluation loads no second
    copy and the run writes the folder once, with the evaluation; other ranks return ``(None, summary, None)``."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    config, lm = ctx.config, ctx.config.policy.lm
    train = ctx.splits.train
    calls, hits = ctx.reasoner.calls, ctx.reasoner.hits
    base = baseline_answers(ctx.reasoner, train, ctx.state)
    ctx.record("baseline", reasoner_calls=ctx.reasoner.calls - calls, cache_hits=ctx.reasoner.hits - hits)
    reward = ToolSelectionReward(
        {s.id: s for s in train},
        ctx.pool,
        ctx.reasoner,
        config.reward.kind,
        config.reward.tool_cost,
        lm.invalid_reward,
        ctx.tool_ids,
        prefix=lm.parse_prefix,
    )
    trainer, processor = build_grpo_trainer(
        config, lm, train, base, [reward], ctx.run_dir / "trainer", ctx.tool_ids, ensure_model(lm)
    )
    started = time.perf_counter()
    checkpoint = None
    if resume:
        from transformers.trainer_utils import get_last_checkpoint

        checkpoint = get_last_checkpoint(str(ctx.run_dir / "trainer"))
        if checkpoint is None:
            raise FileNotFoundError(f"--resume: no checkpoint under {ctx.run_dir / 'trainer'}")
        ctx.record("resume_from", checkpoint=Path(checkpoint).name)
    if config.grpo.steps > 0:  # 0: the model as it starts (its zero-shot self), exported untrained
        trainer.train(resume_from_checkpoint=checkpoint)
    history = [row for row in trainer.state.log_history if "loss" in row or "reward" in row]
    summary = {
        "steps": trainer.state.global_step,
        "train_seconds": round(time.perf_counter() - started, 1),
        "step_seconds": step_seconds(trainer.clock, reward.seconds),
        "invalid_reasons": reward.invalid_reasons,
        "reward_batches": reward.batches,
        "reasoner_calls": ctx.reasoner.calls,
        "reasoner_failures": ctx.reasoner.failures,
        "final": history[-1] if history else None,
    }
    if not trainer.accelerator.is_main_process:
        return None, summary, None
    (ctx.run_dir / "train_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in history))
    model = trainer.accelerator.unwrap_model(trainer.model)
    draft = draft_lm(export_target(ctx, summary), model, processor, lm)
    return draft.directory, summary, draft


def step_seconds(clock: dict, reward_seconds: float) -> dict | None:
    """Mean seconds per GRPO step and where they go: sampling the completions, the reward (tools from the
    cache and the reasoner), TRL's other scoring (old and reference log-probabilities) and the loss's
    forward and backward (the optimizer's update is outside, in ``train_seconds``)."""
    steps = clock.get("steps", 0)
    if not steps:
        return None
    generation = clock.get("generation", 0.0)
    scoring = clock.get("rollout_and_scoring", 0.0)
    per = {
        "step": clock.get("training_step", 0.0),
        "generation": generation,
        "reward": reward_seconds,
        "reference_and_old_logps": scoring - generation - reward_seconds,
        "loss_forward_backward": clock.get("training_step", 0.0) - scoring,
    }
    return {"steps": steps, **{k: round(v / steps, 2) for k, v in per.items()}}


def after_training(ctx, plugin_dir, summary: dict, phases) -> None:
    """Nothing: TRL's trainer logs and plots its own training."""


def member_seconds(ctx) -> list[float]:
    """The LM trains one policy, timed by TRL: no per-member rows."""
    return []

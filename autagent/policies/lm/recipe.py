"""The LM policy's step of the shared recipe (:mod:`autagent.pipeline`): y_base, TRL GRPO, plugin."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .config import LMPolicyConfig


def ensure_model(lm: LMPolicyConfig) -> str:
    path = Path(lm.model_id)
    if lm.build_tiny and not (path / "config.json").exists():
        from ...tiny import build_tiny_qwen2_audio

        build_tiny_qwen2_audio(path)
    return lm.model_id


def lm_config(config) -> LMPolicyConfig:
    from ...config import from_dict

    return from_dict(LMPolicyConfig, config.policy.lm, "policy.lm")


def train_lm(ctx, resume: bool = False) -> tuple[Path | None, dict]:
    """Train with TRL on every rank; rank 0 exports the plugin (others return ``(None, summary)``)."""
    from .plugin import export_lm
    from .reward import ToolSelectionReward
    from .trainer import build_grpo_trainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    config, lm = ctx.config, lm_config(ctx.config)
    train = ctx.splits.train
    base = dict(zip([s.id for s in train], ctx.reasoner.answer_many([(s, None) for s in train])))
    reward = ToolSelectionReward({s.id: s for s in train}, ctx.pool, ctx.reasoner, config.reward.kind,
                                 config.reward.tool_cost, lm.invalid_reward, ctx.tool_ids)
    trainer, processor = build_grpo_trainer(config, lm, train, base, [reward], ctx.run_dir / "trainer", ctx.tool_ids,
                                            ensure_model(lm))
    reward.metrics = trainer._metrics["train"]
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=True if resume else None)
    history = [row for row in trainer.state.log_history if "loss" in row or "reward" in row]
    summary = {"steps": trainer.state.global_step, "train_seconds": round(time.perf_counter() - started, 1),
               "invalid_reasons": reward.invalid_reasons, "final": history[-1] if history else None}
    if not trainer.accelerator.is_main_process:
        return None, summary
    (ctx.run_dir / "train_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in history))
    plugin_dir = export_lm(ctx.run_dir / "plugin", trainer.accelerator.unwrap_model(trainer.model), processor, lm,
                           ctx.tool_ids, config.tools.profile, config.tools.settings, config.tools.max_seconds,
                           ctx.config_dict, {"training": summary})
    return plugin_dir, summary


def has_checkpoints(run_dir: Path) -> bool:
    return any((run_dir / "trainer").glob("checkpoint-*"))

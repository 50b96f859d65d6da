"""The LM policy's settings (``policy.lm``); the GRPO hyper-parameters come from ``grpo:``."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LMPolicyConfig:
    model_id: str = "Qwen/Qwen2-Audio-7B-Instruct"
    """Hub id or local folder of the policy model."""
    build_tiny: bool = False
    """Build a tiny random Qwen2-Audio at model_id when it is missing (CPU runs and tests)."""
    learning_rate: float = 1e-6
    """The paper's 1e-6."""
    per_device_train_batch_size: int = 8
    """Completions per device per micro-batch."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per update."""
    max_completion_length: int = 64
    """Tokens the agent may write (room for reasoning before <answer>)."""
    constrained_decoding: bool = False
    """Restrict generation to valid <answer> lists; the same mask then applies to every log-probability."""
    invalid_reward: float = -1.0
    """Reward of a completion whose <answer> cannot be parsed."""
    bf16: bool = True
    """bfloat16 on GPU (ignored on CPU)."""
    use_cpu: bool = False
    """Train on CPU (the tiny model)."""
    gradient_checkpointing: bool = False
    """Trade compute for memory."""
    deepspeed: str | None = None
    """A DeepSpeed JSON config (e.g. experiments/accelerate/zero2.json)."""
    save_steps: int = 50
    """Checkpoint every N steps."""
    logging_steps: int = 1
    """Log every N steps."""
    audio_max_seconds: float = 30.0
    """Clip length the policy hears."""
    extra_args: dict = field(default_factory=dict)
    """Any other trl.GRPOConfig field."""

    def __post_init__(self):
        if self.learning_rate <= 0 or self.max_completion_length < 1 or self.per_device_train_batch_size < 1:
            raise ValueError("policy.lm: learning_rate > 0, max_completion_length >= 1, per_device_train_batch_size >= 1")
        reserved = {"loss_type", "scale_rewards", "num_generations", "beta", "epsilon", "temperature", "max_steps"}
        clash = sorted(reserved & set(self.extra_args))
        if clash:
            raise ValueError(f"policy.lm.extra_args: set {clash} through grpo: instead (they are shared with the router)")

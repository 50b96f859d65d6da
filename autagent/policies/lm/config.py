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
    generation_batch_size: int = 8
    """Rows the rollout gives ``generate`` at once: TRL hands it the whole local generation batch
    (per-device batch x accumulation steps), whose KV cache would otherwise be held in one piece."""
    eval_batch_size: int = 8
    """Queries the exported plugin selects for at once (evaluation, ``autagent eval --plugin``)."""
    device: str | None = None
    """Where the exported plugin runs when loaded outside training: a torch device, or None for the
    best available (CUDA when present, else the CPU)."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per update."""
    max_completion_length: int = 64
    """Tokens the agent may write (room for reasoning before <answer>)."""
    constrained_decoding: bool = False
    """Restrict generation to valid <answer> lists; the same mask then applies to every log-probability."""
    invalid_reward: float = -1.0
    """Reward of a completion whose <answer> cannot be parsed."""
    bf16: bool = True
    """bf16 compute with fp32 master weights and optimizer state, on a GPU or the CPU alike: without
    DeepSpeed the weights are fp32 and accelerate autocasts the forward passes to bf16; under
    DeepSpeed they are bf16 and DeepSpeed keeps the fp32 masters (docs/cluster.md).  The reference
    model (beta > 0) is held in bf16.  False: fp32 throughout."""
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
            raise ValueError(
                "policy.lm: learning_rate > 0, max_completion_length >= 1, per_device_train_batch_size >= 1"
            )
        if self.generation_batch_size < 1 or self.eval_batch_size < 1:
            raise ValueError("policy.lm: generation_batch_size and eval_batch_size must be >= 1")
        if self.extra_args.get("use_vllm"):
            raise ValueError(
                "policy.lm.extra_args.use_vllm: the LM policy hears the clip, and its rollout generates with "
                "transformers from the audio features; TRL's vLLM path would load and sync a vLLM engine that "
                "receives no audio and returns log-probabilities for text alone. Serve the reasoner with vLLM "
                "instead (reasoner.kind: openai, docs/cluster.md)"
            )
        reserved = {"loss_type", "scale_rewards", "num_generations", "beta", "epsilon", "temperature", "max_steps"}
        clash = sorted(reserved & set(self.extra_args))
        if clash:
            raise ValueError(
                f"policy.lm.extra_args: set {clash} through grpo: instead (they are shared with the router)"
            )

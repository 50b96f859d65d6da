"""A memory plan for the LM policy's training, computed from the run config: ``autagent plan``.

Per rank (GPU), in bytes, each item from its own arithmetic:

* **policy weights, gradients, optimizer state** under the configured DeepSpeed ZeRO stage, with the
  ZeRO paper's mixed-precision accounting (Rajbhandari et al., 2020): 16-bit weights (2 bytes a
  parameter) and gradients (2), and AdamW's fp32 master weights, first and second moments (12);
  stage 1 shards the optimizer state over the ranks, stage 2 the gradients too, stage 3 the
  weights too.  Without DeepSpeed (DDP or one process) the model is trained in the dtype it was
  loaded in: weights, gradients and both AdamW moments in that dtype, nothing sharded;
* **the reference model** (when ``grpo.beta > 0``), frozen, in the policy's dtype (sharded under
  ZeRO-3);
* **the reasoner in process** (``reasoner.kind: qwen2-audio``), frozen, in its dtype, plus the KV
  cache of one of its batches;
* **the KV cache of one generation chunk**: ``policy.lm.generation_batch_size`` rows of prompt
  (audio tokens + text) and completion, 2 x layers x key-value heads x head size per token;
* **activations of one micro-batch**: with gradient checkpointing, each decoder layer's input
  (2 s b h bytes a layer) plus one layer's working set recomputed (34 s b h bytes, Korthikanti et
  al., 2022, without their 5 a s^2 b attention-score term: transformers runs SDPA, which does not
  keep the score matrix); without it, every layer's working set; and the completion logits in fp32;
* **DeepSpeed's communication buckets** (its all-gather and reduce buckets, 16-bit);
* **tools**: the cluster backends' weights on the GPUs Ray gives them.  They are computed before
  training and their actors are released before it starts, so they count in the precompute
  phase, not here.

Weights, gradients, optimizer state, buckets and frozen models stay for the whole run; the three
transient items belong to the three phases of a step, which follow one another (sampling, then the
rewards, then the update), so the peak is the static sum plus the largest phase.

Parameter counts come from the model's config (a local folder's ``config.json``, or the published
config of a known hub id below), by building the model on the ``meta`` device: no weights, no
download.  A tiny model built here is checked item by item against what torch reports
(``tests/test_plan.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

GB = 1e9
HEADROOM_GB = 2.0
"""Kept free per GPU: the CUDA context, the allocator's fragmentation, NCCL buffers."""
PROMPT_TEXT_TOKENS = 400
"""Text tokens of one agent prompt (its template, seven tool descriptions, the question): the
paper's tool list measured at 314 tokens with six tools (``bench/scaling.py``), rounded up."""
RECORD_TOKENS = 1200
"""Tokens of the reasoner's prompt beyond the clip: the question, the choices and up to seven tool
records in the paper's shapes (a transcript and a chord timeline are the longest)."""

KNOWN_CONFIGS = {
    # The published config.json of Qwen/Qwen2-Audio-7B-Instruct (the fields that size the model).
    "Qwen/Qwen2-Audio-7B-Instruct": {
        "model_type": "qwen2_audio",
        "audio_token_index": 151646,
        "audio_config": {
            "model_type": "qwen2_audio_encoder",
            "d_model": 1280,
            "encoder_layers": 32,
            "encoder_attention_heads": 20,
            "encoder_ffn_dim": 5120,
            "num_mel_bins": 128,
            "max_source_positions": 1500,
        },
        "text_config": {
            "model_type": "qwen2",
            "vocab_size": 156032,
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": False,
        },
    },
}
TOOL_PARAMETERS = {
    # Parameters of the paper's tool models (their published model cards), loaded in fp32 by the cluster backends.
    "openai/whisper-large-v3": 1.55e9,
    "iic/emotion2vec_plus_large": 0.33e9,
    "MIT/ast-finetuned-audioset-10-10-0.4593": 0.087e9,
}


@dataclass
class Architecture:
    """What sizes a Qwen2-Audio model: its parameters and its decoder's shape."""

    parameters: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def of(cls, model_id: str) -> Architecture:
        """From a local folder's ``config.json`` or a known hub id; the parameters are counted on the
        meta device (no weights are read)."""
        import torch
        from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

        path = Path(model_id) / "config.json"
        if path.is_file():
            raw = json.loads(path.read_text())
        elif model_id in KNOWN_CONFIGS:
            raw = KNOWN_CONFIGS[model_id]
        else:
            raise ValueError(
                f"{model_id}: no config.json there and not a known hub id ({', '.join(KNOWN_CONFIGS)}); "
                "download the model's config.json into a folder and name that folder"
            )
        config = Qwen2AudioConfig(**{k: v for k, v in raw.items() if k != "model_type"})
        with torch.device("meta"):
            model = Qwen2AudioForConditionalGeneration(config)
        text = config.text_config
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        return cls(
            parameters=sum(p.numel() for p in model.parameters()),
            layers=text.num_hidden_layers,
            hidden=text.hidden_size,
            heads=text.num_attention_heads,
            kv_heads=text.num_key_value_heads,
            head_dim=head_dim,
            vocab=text.vocab_size,
        )

    def kv_cache_bytes(self, rows: int, tokens: int, dtype_bytes: int) -> int:
        """Keys and values of every decoder layer for ``rows`` sequences of ``tokens``."""
        return 2 * self.layers * self.kv_heads * self.head_dim * rows * tokens * dtype_bytes

    def activation_bytes(self, rows: int, tokens: int, checkpointing: bool, dtype_bytes: int = 2) -> int:
        """One micro-batch's training activations in the decoder (Korthikanti et al.'s per-layer count
        without the attention scores, stated for 16-bit activations and scaled to ``dtype_bytes``)."""
        s, b, h = tokens, rows, self.hidden
        one_layer = 34 * s * b * h * dtype_bytes // 2
        if checkpointing:
            return self.layers * s * b * h * dtype_bytes + one_layer
        return self.layers * one_layer


def audio_tokens(seconds: float) -> int:
    """Qwen2-Audio's audio tokens for a clip: 100 mel frames a second, a stride-2 conv, then 2x pooling."""
    return int(seconds * 100) // 2 // 2


@dataclass
class Plan:
    rows: list[tuple[str, float, str, str | None]] = field(default_factory=list)
    """(item, bytes, how it was counted, the phase of a step it lives in; None: the whole run)."""
    notes: list[str] = field(default_factory=list)

    def add(self, item: str, nbytes: float, how: str, phase: str | None = None) -> None:
        self.rows.append((item, float(nbytes), how, phase))

    @property
    def static(self) -> float:
        return sum(b for _, b, _, phase in self.rows if phase is None)

    @property
    def phases(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for _, nbytes, _, phase in self.rows:
            if phase is not None:
                out[phase] = out.get(phase, 0.0) + nbytes
        return out

    @property
    def total(self) -> float:
        """The peak: everything static plus the largest phase."""
        return self.static + max(self.phases.values(), default=0.0)

    def fits(self, gpu_gb: float) -> bool:
        return self.total / GB <= gpu_gb - HEADROOM_GB

    def table(self, gpu_gb: float | None = None) -> str:
        lines = ["| item | GB | how |", "|---|---|---|"]
        lines += [
            f"| {item}{f' ({phase})' if phase else ''} | {nbytes / GB:.1f} | {how} |"
            for item, nbytes, how, phase in self.rows
        ]
        largest = max(self.phases.items(), key=lambda kv: kv[1], default=("none", 0.0))
        lines.append(
            f"| **peak per rank** | **{self.total / GB:.1f}** | the whole run's {self.static / GB:.1f} + the "
            f"largest phase ({largest[0]}, {largest[1] / GB:.1f}) |"
        )
        if gpu_gb is not None:
            verdict = "fits" if self.fits(gpu_gb) else "does NOT fit"
            lines.append(
                f"| on a {gpu_gb:g} GB card, keeping {HEADROOM_GB:g} GB free | {gpu_gb - HEADROOM_GB:.1f} | "
                f"**{verdict}** |"
            )
        return "\n".join(lines + [""] + [f"* {n}" for n in self.notes])


def deepspeed_settings(config) -> dict | None:
    """The DeepSpeed JSON the run trains with (``policy.lm.deepspeed``, or the one the accelerate
    launcher config names), or None without DeepSpeed."""
    import yaml

    path = config.policy.lm.deepspeed
    if not path and config.launcher.kind == "accelerate" and config.launcher.accelerate_config:
        launcher = yaml.safe_load(Path(config.launcher.accelerate_config).read_text()) or {}
        if launcher.get("distributed_type") == "DEEPSPEED":
            path = (launcher.get("deepspeed_config") or {}).get("deepspeed_config_file")
    return json.loads(Path(path).read_text()) if path else None


def ranks_of(config) -> int:
    """Processes the launcher starts: ``launcher.num_processes``, else its accelerate config's, else 1."""
    import yaml

    if config.launcher.kind != "accelerate":
        return 1
    if config.launcher.num_processes:
        return config.launcher.num_processes
    if config.launcher.accelerate_config:
        return int((yaml.safe_load(Path(config.launcher.accelerate_config).read_text()) or {}).get("num_processes", 1))
    return 1


def plan_training(config) -> Plan:
    """The per-rank memory plan of an LM-policy run config (:class:`autagent.config.RunConfig`)."""
    lm, grpo = config.policy.lm, config.grpo
    ranks = ranks_of(config)
    on_gpu = not lm.use_cpu
    dtype_bytes = 2 if lm.bf16 and on_gpu else 4
    deepspeed = deepspeed_settings(config)
    stage = int(deepspeed.get("zero_optimization", {}).get("stage", 0)) if deepspeed else None
    arch = Architecture.of(lm.model_id)
    p = arch.parameters
    plan = Plan()
    plan.notes.append(
        f"{lm.model_id}: {p / 1e9:.2f} B parameters; {ranks} rank(s); "
        + (f"DeepSpeed ZeRO-{stage}" if stage is not None else "no DeepSpeed (DDP)")
        + f"; {'bf16' if dtype_bytes == 2 else 'fp32'}"
    )
    if stage is None:
        plan.add("policy weights", p * dtype_bytes, f"{p / 1e9:.2f} B x {dtype_bytes} bytes")
        plan.add("gradients", p * dtype_bytes, f"{p / 1e9:.2f} B x {dtype_bytes} bytes")
        plan.add(
            "AdamW moments", 2 * p * dtype_bytes, f"2 x {p / 1e9:.2f} B x {dtype_bytes} bytes (in the model's dtype)"
        )
    else:
        shard = lambda applies: ranks if applies else 1  # noqa: E731
        plan.add(
            "policy weights (16-bit)", 2 * p / shard(stage >= 3), f"2 bytes a parameter{' / ranks' * (stage >= 3)}"
        )
        plan.add("gradients (16-bit)", 2 * p / shard(stage >= 2), f"2 bytes a parameter{' / ranks' * (stage >= 2)}")
        plan.add(
            "AdamW fp32 master, m, v",
            12 * p / shard(stage >= 1),
            f"12 bytes a parameter{' / ranks' * (stage >= 1)} (ZeRO-{stage})",
        )
    if deepspeed:
        zero = deepspeed.get("zero_optimization", {})
        buckets = [zero.get("allgather_bucket_size", 5e8), zero.get("reduce_bucket_size", 5e8)]
        elements = sum(arch.hidden**2 if b == "auto" else float(b) for b in buckets)
        plan.add("DeepSpeed buckets", 2 * elements, "all-gather + reduce buckets, 2 bytes an element")
    if grpo.beta > 0:
        plan.add(
            "reference model (beta > 0)",
            dtype_bytes * p / (ranks if stage == 3 else 1),
            f"frozen copy, {dtype_bytes} bytes a parameter",
        )
    prompt = audio_tokens(lm.audio_max_seconds) + PROMPT_TEXT_TOKENS
    sequence = prompt + lm.max_completion_length
    rows = min(lm.generation_batch_size, lm.per_device_train_batch_size * lm.gradient_accumulation_steps)
    plan.add(
        "KV cache, one generation chunk",
        arch.kv_cache_bytes(rows, sequence, dtype_bytes),
        f"{rows} rows x {sequence} tokens ({prompt} prompt, {audio_tokens(lm.audio_max_seconds)} of them audio)",
        "sampling",
    )
    micro = lm.per_device_train_batch_size
    plan.add(
        "activations, one micro-batch",
        arch.activation_bytes(micro, sequence, lm.gradient_checkpointing, dtype_bytes)
        + micro * lm.max_completion_length * arch.vocab * 4,
        f"{micro} rows x {sequence} tokens, checkpointing {'on' if lm.gradient_checkpointing else 'off'}; "
        "completion logits in fp32",
        "update",
    )
    if config.reasoner.kind == "qwen2-audio":
        qwen = config.reasoner.qwen2_audio
        reasoner = Architecture.of(qwen.model_id)
        r_bytes = 2 if qwen.dtype in ("bfloat16", "float16") else 4
        tokens = audio_tokens(30.0) + RECORD_TOKENS + qwen.max_new_tokens
        plan.add(
            "reasoner weights", reasoner.parameters * r_bytes, f"{reasoner.parameters / 1e9:.2f} B x {r_bytes} bytes"
        )
        plan.add(
            "reasoner KV cache",
            reasoner.kv_cache_bytes(qwen.batch_size, tokens, r_bytes),
            f"{qwen.batch_size} prompts (reasoner.qwen2_audio.batch_size) of {tokens} tokens",
            "rewards",
        )
    else:
        plan.notes.append(f"reasoner: {config.reasoner.kind} (not in this process)")
    tools = [config.tools.settings.get(t, {}).get("model_id") for t in config.tools.tool_ids]
    tool_bytes = sum(4 * TOOL_PARAMETERS.get(m, 0) for m in tools if m)
    fractions = ", ".join(f"{t} {f:g}" for t, f in config.tools.gpu_fraction.items()) or "none"
    plan.notes.append(
        f"tools: {tool_bytes / GB:.1f} GB of fp32 weights on the GPUs Ray gives them (tools.gpu_fraction: {fractions}) "
        "during the precompute; their actors are released before training starts"
    )
    return plan


def main_plan(config, gpu_gb: float | None) -> tuple[str, bool]:
    """The table ``autagent plan`` prints, and whether the run fits ``gpu_gb`` (True without a size)."""
    if config.policy.kind != "lm":
        return "the router trains on a CPU in a few hundred MB: no GPU plan is needed", True
    plan = plan_training(config)
    return plan.table(gpu_gb), gpu_gb is None or plan.fits(gpu_gb)

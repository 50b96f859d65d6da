"""A memory plan for the LM policy's training, computed from the run config: ``autagent plan``.

Per rank (GPU), in bytes, for each phase of a GRPO step, in step 1 and in step 2 (the steady state):

* **sampling**: the rollout, in chunks of ``policy.lm.generation_batch_size`` rows.  Its peak is the
  prefill (the prompt's KV cache, one layer's inference working set and, with
  ``rollout.prompt_logits: all``, logits over the whole vocabulary at every prompt position, in bf16
  and again in fp32: accelerate's autocast wrapper returns fp32 outputs) or the end of decoding (the
  KV cache of prompt and completion; a static cache holds its full length throughout);
* **rewards**: the reference model's log-probabilities (beta > 0; one micro-batch of prompt +
  completion, no gradient) and the reasoner in process (its KV cache);
* **update**: one micro-batch's forward and backward with every gradient alive (they accumulate over
  the micro-batches); with gradient checkpointing the decoder's and the audio tower's layer inputs,
  plus the backward of the top layer (its recomputed working set and its gradients: twice one layer's
  working set) or of the fused LM head (its fp32 weight gradient);
* **optimizer**: the gradients and AdamW's moments, which are first allocated in step 1's optimizer
  step and live from then on (through step 2's sampling and update);
* **between** steps: what stays allocated (gradients are freed after each optimizer step).

Precision: ``policy.lm.bf16`` without DeepSpeed keeps fp32 master weights (4 bytes a parameter),
fp32 gradients and moments, and autocast holds a bf16 copy of the weights during each forward pass;
under DeepSpeed ZeRO (stage 1-3) the module is bf16 and the optimizer keeps fp32 master partitions,
as DeepSpeed 0.18's ``stage_1_and_2.py`` allocates them: the flat bf16 weights (2 bytes), the fp32
master partition (4 / ranks), AdamW's moments on it (8 / ranks), the contiguous bf16 gradient
partition (2 / ranks, stage 2), two reduce buckets of ``reduce_bucket_size`` elements during the
backward (``overlap_comm``) and an fp32 copy of the gradient partition during the step (4 / ranks).
LoRA: a frozen base (bf16) and fp32 adapters with their gradients and moments; the audio tower then
keeps no activations for the backward, and the reference is the base with the adapters off.
:class:`Runtime` names what the code does that the config does not say: main at 64bb085 updated
bf16 weights in place (no masters), the settings of the measurements in ``tests/test_plan.py``.

Parameter counts come from the model's config (a local folder's ``config.json``, or the published
config of a known hub id below), by building the model on the ``meta`` device: no weights, no
download.  The activation coefficients (a decoder layer's working set of 20 h + 4 kv + 8 ffn bytes a
token for training, 4 h + 6 ffn without gradients) are counted from the layers' code and were checked
against peaks measured on an H100 (``tests/test_plan.py``, within 3 % for every phase measured).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .model_shapes import AUDIO_FRAMES, KNOWN_CONFIGS, TOOL_PARAMETERS, Architecture, audio_tokens

__all__ = ["KNOWN_CONFIGS", "Architecture", "audio_tokens"]

GB = 1e9
HEADROOM_GB = 2.0
"""Kept free per GPU: the CUDA context, the allocator's fragmentation, NCCL buffers."""
PROMPT_TEXT_TOKENS = 770
"""Text tokens of one agent prompt around the clip's 750 audio tokens (chat template, the tool list,
the question): the H100 run measured prompts of 1,517-1,520 tokens with the paper's tools."""
RECORD_TOKENS = 1200
"""Tokens of the reasoner's prompt beyond the clip: the question, the choices and up to seven tool
records in the paper's shapes (a transcript and a chord timeline are the longest)."""
PHASES = ("sampling", "rewards", "update", "optimizer", "between")


@dataclass(frozen=True)
class Runtime:
    """What the training code does that a run config does not say."""

    bf16_masters: bool = True
    """This code: under ``bf16`` without DeepSpeed, fp32 master weights and optimizer state.  False:
    main at 64bb085, which loaded bf16 weights and let AdamW update them in place (the runs whose
    peaks ``tests/test_plan.py`` reproduces)."""


CURRENT = Runtime()
MAIN_64BB085 = Runtime(bf16_masters=False)


@dataclass(frozen=True)
class Setup:
    """Everything the arithmetic reads, taken from a run config by :func:`setup_of`."""

    arch: Architecture
    ranks: int
    stage: int | None
    """DeepSpeed ZeRO stage, None without DeepSpeed."""
    reduce_bucket: float
    overlap_comm: bool
    bf16: bool
    masters: bool
    lora_parameters: int | None
    beta: float
    generation_rows: int
    micro_rows: int
    prompt_tokens: int
    completion_tokens: int
    prompt_logits: str
    static_cache_tokens: int | None
    checkpointing: bool
    reasoner: Architecture | None = None
    reasoner_bytes: int = 2
    reasoner_batch: int = 8
    reasoner_tokens: int = 0


@dataclass
class Plan:
    setup: Setup
    phases: dict = field(default_factory=dict)
    """(step, phase) -> [(moment, [(item, bytes, how), ...]), ...]: the peak of a phase is its fullest moment."""
    notes: list[str] = field(default_factory=list)

    def peak(self, step: int, phase: str) -> tuple[float, str, list]:
        """(bytes, moment, items) of the fullest moment of ``phase`` in ``step``."""
        moments = self.phases[(step, phase)]
        return max(((sum(b for _, b, _ in items), moment, items) for moment, items in moments), key=lambda t: t[0])

    @property
    def total(self) -> float:
        return max(self.peak(step, phase)[0] for step, phase in self.phases)

    def fits(self, gpu_gb: float) -> bool:
        return self.total / GB + HEADROOM_GB <= gpu_gb

    def overflow(self, gpu_gb: float) -> str | None:
        """Where the plan first exceeds the card (less the headroom): the phase and the item whose
        bytes take it past; None when it fits."""
        budget = (gpu_gb - HEADROOM_GB) * GB
        for step, phase in self.phases:
            total, moment, items = self.peak(step, phase)
            if total <= budget:
                continue
            running = 0.0
            for item, nbytes, _ in items:
                running += nbytes
                if running > budget:
                    return (
                        f"step {step}, {phase} ({moment}): {total / GB:.1f} GB; {item} ({nbytes / GB:.1f} GB) takes it "
                        f"past {budget / GB:.1f} GB"
                    )
        return None


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


def setup_of(config, prompt_tokens: int | None = None, runtime: Runtime = CURRENT) -> Setup:
    """The plan's inputs from a run config; ``prompt_tokens`` (clip included) replaces the estimate."""
    lm, grpo = config.policy.lm, config.grpo
    arch = Architecture.of(lm.model_id)
    deepspeed = deepspeed_settings(config)
    zero = (deepspeed or {}).get("zero_optimization", {})
    bucket = zero.get("reduce_bucket_size", 5e8)
    reasoner, r_bytes, r_batch, r_tokens = None, 2, 8, 0
    if config.reasoner.kind == "qwen2-audio":
        qwen = config.reasoner.qwen2_audio
        reasoner, r_bytes = Architecture.of(qwen.model_id), 2 if qwen.dtype in ("bfloat16", "float16") else 4
        r_batch, r_tokens = qwen.batch_size, audio_tokens(30.0) + RECORD_TOKENS + qwen.max_new_tokens
    rollout = lm.rollout
    prompt = prompt_tokens or audio_tokens(lm.audio_max_seconds) + PROMPT_TEXT_TOKENS
    return Setup(
        arch=arch,
        ranks=ranks_of(config),
        stage=int(zero.get("stage", 0)) if deepspeed else None,
        reduce_bucket=arch.hidden**2 if bucket == "auto" else float(bucket),
        overlap_comm=bool(zero.get("overlap_comm", False)),
        bf16=lm.bf16,
        masters=runtime.bf16_masters,
        lora_parameters=arch.lora_parameters(lm.lora) if lm.lora else None,
        beta=grpo.beta,
        generation_rows=min(lm.generation_batch_size, lm.per_device_train_batch_size * lm.gradient_accumulation_steps),
        micro_rows=lm.per_device_train_batch_size,
        prompt_tokens=prompt,
        completion_tokens=lm.max_completion_length,
        prompt_logits=rollout.prompt_logits,
        static_cache_tokens=max(rollout.max_prompt_tokens, prompt) if rollout.cache == "static" else None,
        checkpointing=lm.gradient_checkpointing,
        reasoner=reasoner,
        reasoner_bytes=r_bytes,
        reasoner_batch=r_batch,
        reasoner_tokens=r_tokens,
    )


def plan_of(s: Setup) -> Plan:
    """The per-rank plan of a :class:`Setup`: every phase of steps 1 and 2, item by item."""
    a, p, n = s.arch, s.arch.parameters, s.ranks
    b16 = 2 if s.bf16 else 4  # bytes of a frozen weight, an activation, a KV entry
    per = lambda applies: n if applies else 1  # noqa: E731  (ZeRO shards over the ranks)
    stage, lora = s.stage, s.lora_parameters
    trained = lora if lora is not None else p
    keep: list = []  # held through the run
    grads: list = []  # from the first micro-batch's backward to the end of the optimizer step
    step_items: list = []  # in the optimizer step only
    later_step_items: list = []  # in the optimizer steps after the first
    moments: list = []  # from step 1's optimizer step on
    if lora is not None:
        keep.append(("frozen base", b16 * p / per(stage == 3), f"{p / 1e9:.2f} B x {b16} bytes"))
    if stage is None:
        w = 4 if (s.masters or not s.bf16 or lora is not None) else 2
        name = "LoRA adapters" if lora is not None else "policy weights"
        kind = "fp32" if lora is not None else "fp32 masters" if w == 4 and s.bf16 else "bf16, updated in place"
        kind = kind if s.bf16 else "fp32"
        keep.append((name, w * trained, f"{trained / 1e9:.3f} B x {w} bytes ({kind})"))
        grads.append(("gradients", w * trained, f"{w} bytes a trained parameter"))
        moments.append(("AdamW moments", 2 * w * trained, f"2 x {w} bytes a trained parameter"))
    else:
        if lora is None:
            keep.append(("policy weights (bf16, flat)", 2 * p / per(stage == 3), "2 bytes a parameter"))
        else:
            keep.append(("LoRA adapters (bf16)", 2 * trained, "2 bytes a trained parameter"))
        keep.append(("DeepSpeed fp32 master partition", 4 * trained / per(stage >= 1), "4 bytes / ranks"))
        moments.append(("AdamW moments (fp32 partition)", 8 * trained / per(stage >= 1), "8 bytes / ranks"))
        grads.append(
            ("gradient partition (bf16)", 2 * trained / per(stage >= 2), f"2 bytes{' / ranks' * (stage >= 2)}")
        )
        step_items.append(("fp32 gradient partition", 4 * trained / per(stage >= 1), "4 bytes / ranks, in the step"))
        # Seen on an H100 (make gpu-check, 2.09 B under ZeRO-2, one rank): step 2's optimizer step peaked
        # 4.3 GB (2 bytes a parameter) above step 1's; the buffer is DeepSpeed's, which one is not established.
        later_step_items = [("DeepSpeed's bf16 buffer from step 2 on", 2 * trained / per(stage >= 2), "measured")]
    if s.beta > 0 and lora is None:
        keep.append(("reference model", b16 * p / per(stage == 3), f"frozen, {b16} bytes a parameter"))
    if s.reasoner is not None:
        r = s.reasoner
        keep.append(("reasoner weights", r.parameters * s.reasoner_bytes, f"{r.parameters / 1e9:.2f} B in process"))
    # autocast's bf16 copies of fp32 weights, held through each forward pass
    cast = (
        [("autocast's bf16 weight copies", 2 * p, "2 bytes a parameter")]
        if (s.bf16 and stage is None and lora is None and s.masters)
        else []
    )
    plan = Plan(setup=s)

    # sampling
    rows, prompt, total_tokens = s.generation_rows, s.prompt_tokens, s.prompt_tokens + s.completion_tokens
    how = f"{rows} rows"
    if s.static_cache_tokens is not None:
        full = a.kv_cache_bytes(rows, s.static_cache_tokens + s.completion_tokens, b16)
        prefill_kv = end_kv = ("static KV cache", full, f"{how} x {s.static_cache_tokens + s.completion_tokens} tokens")
    else:
        prefill_kv = ("KV cache of the prompts", a.kv_cache_bytes(rows, prompt, b16), f"{how} x {prompt} tokens")
        end_kv = ("KV cache, prompt + completion", a.kv_cache_bytes(rows, total_tokens, b16), f"{how} x {total_tokens}")
    positions = prompt if s.prompt_logits == "all" else 1
    logits = [("prompt logits", rows * positions * a.vocab * b16, f"{how} x {positions} positions x {a.vocab}")]
    if s.bf16 and stage is None:  # accelerate's autocast wrapper returns fp32 outputs
        logits.append(("their fp32 copy", rows * positions * a.vocab * 4, "accelerate's convert_outputs_to_fp32"))
    working = ("one layer's working set", a.layer_inference_bytes(rows, prompt, b16), f"{how} x {prompt}, no gradient")
    prefill = max([working], logits, key=lambda items: sum(b for _, b, _ in items))
    sampling = [("prefill", cast + [prefill_kv] + prefill), ("decoding", cast + [end_kv])]

    # rewards
    micro, sequence = s.micro_rows, total_tokens
    rewards = [("rewards", [])]
    if s.beta > 0:
        ref = a.layer_inference_bytes(micro, sequence, b16)
        rewards.append(("reference log-probs", [("reference forward", ref, f"{micro} rows x {sequence}, no gradient")]))
    if s.reasoner is not None:
        kv = s.reasoner.kv_cache_bytes(s.reasoner_batch, s.reasoner_tokens, s.reasoner_bytes)
        rewards.append(("reasoner", [("reasoner KV cache", kv, f"{s.reasoner_batch} x {s.reasoner_tokens} tokens")]))

    # update: one micro-batch, every gradient alive
    mhow = f"{micro} rows x {sequence} tokens"
    tower = lora is None  # a frozen tower (LoRA on the decoder) keeps nothing for the backward
    audio_inputs = a.audio_layers * micro * AUDIO_FRAMES * a.audio_dim * b16 if tower else 0
    if s.checkpointing:
        saved = [("decoder layer inputs", a.layers * micro * sequence * a.hidden * b16, f"{a.layers} layers, {mhow}")]
        if tower:
            saved.append(("audio tower layer inputs", audio_inputs, f"{a.audio_layers} layers x {AUDIO_FRAMES} frames"))
        layer = [("one layer's backward", 2 * a.layer_training_bytes(micro, sequence, b16), "recomputed + gradients")]
    else:
        # an encoder layer keeps its two LayerNorms' inputs and outputs, q, k, v, the attention output, fc1 and GELU
        audio_all = a.audio_layers * micro * AUDIO_FRAMES * (16 * a.audio_dim + 4 * a.audio_ffn) * b16 / 2
        saved = [("every layer's activations", a.layers * a.layer_training_bytes(micro, sequence, b16), mhow)]
        if tower:
            saved.append(("audio tower activations", audio_all, f"{a.audio_layers} layers x {AUDIO_FRAMES} frames"))
        layer = [("one layer's gradients", a.layer_training_bytes(micro, sequence, b16), "")]
    head_grad = (a.vocab * a.hidden * (4 + 2) if lora is None else 0) + 4096 * 32768 * 2
    head = [("fused LM head's backward", head_grad, "fp32 weight gradient + its copy + one tile")]
    buckets = []
    if stage is not None and stage >= 2:
        count = 2 if s.overlap_comm else 1
        buckets.append(("reduce buckets", count * s.reduce_bucket * 2, f"{count} x {s.reduce_bucket:.3g} elements"))
    update = [
        ("forward end", grads + buckets + cast + saved),
        ("backward", grads + buckets + saved + max(layer, head, key=lambda items: sum(b for _, b, _ in items))),
    ]

    for step in (1, 2):
        persistent = keep + (moments if step == 2 else [])
        plan.phases[(step, "sampling")] = [(m, persistent + items) for m, items in sampling]
        plan.phases[(step, "rewards")] = [(m, persistent + items) for m, items in rewards]
        plan.phases[(step, "update")] = [(m, persistent + items) for m, items in update]
        later = later_step_items if step == 2 else []
        plan.phases[(step, "optimizer")] = [("step", keep + moments + grads + step_items + later)]
        plan.phases[(step, "between")] = [("after the step", keep + moments)]
    return plan


def plan_training(config, prompt_tokens: int | None = None, runtime: Runtime = CURRENT) -> Plan:
    """The per-rank memory plan of an LM-policy run config (:class:`autagent.config.RunConfig`)."""
    lm = config.policy.lm
    setup = setup_of(config, prompt_tokens, runtime)
    plan = plan_of(setup)
    plan.notes.append(
        f"{lm.model_id}: {setup.arch.parameters / 1e9:.2f} B parameters; {setup.ranks} rank(s); "
        + (f"DeepSpeed ZeRO-{setup.stage}" if setup.stage is not None else "no DeepSpeed")
        + f"; {'bf16 compute' if lm.bf16 else 'fp32'}"
        + (f"; LoRA r {lm.lora.r} ({setup.lora_parameters / 1e6:.1f} M trained)" if lm.lora else "")
        + f"; prompts of {setup.prompt_tokens} tokens{' (measured)' if prompt_tokens else ' (estimated)'}"
    )
    if setup.reasoner is None:
        plan.notes.append(f"reasoner: {config.reasoner.kind} (not in this process)")
    tools = [config.tools.settings.get(t, {}).get("model_id") for t in config.tools.tool_ids]
    tool_bytes = sum(4 * TOOL_PARAMETERS.get(m, 0) for m in tools if m)
    plan.notes.append(
        f"tools: {tool_bytes / GB:.1f} GB of fp32 weights on the GPUs Ray gives them during the precompute; "
        "their actors are released before training starts"
    )
    return plan

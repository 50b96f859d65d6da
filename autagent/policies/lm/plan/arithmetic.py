"""A memory plan for the LM policy's training, computed from the run config: ``autagent plan``.

Per rank (GPU), in bytes, for each phase of a GRPO step, in step 1 and in step 2 (AdamW's moments are
first allocated in step 1's optimizer step), each phase's peak being its fullest moment:

* **sampling**: the rollout, a chunk of ``policy.lm.generation_batch_size`` rows at a time: the prefill
  (the prompt's KV cache and one layer's working set, or with ``rollout.prompt_logits: all`` the
  logits at every prompt position), the end of decoding (the KV cache of prompt and completion), and
  with LoRA the merging of the adapters into the weights;
* **rewards**: the reference model's log-probabilities (beta > 0) and the reasoner in process;
* **update**: one micro-batch's forward end (the checkpointed layers' inputs, the activations outside
  them, autocast's weight copies) and backward (one layer's recomputed working set, or the fused LM
  head's), with every gradient alive;
* **optimizer**: the gradients and the moments, and under DeepSpeed its flat and fp32 copies of the
  gradient partition (``stage_1_and_2.py``'s ``step``);
* **between** steps: what stays allocated.

Every item is counted from the code that allocates it, or fitted on the GPU runs on record with the runs
named (:mod:`.terms`); ``tests/test_plan.py`` holds the plan at or above every measured
phase on record and at most 8 % above, and refitted without each run still at or above that run's.
:class:`Runtime` names what the code does that the config does not say (the code each record ran).
Parameter counts come from the model's config on the ``meta`` device (:mod:`.shapes`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .shapes import AUDIO_FRAMES, KNOWN_CONFIGS, TOOL_PARAMETERS, Architecture, audio_tokens
from .terms import FITTED, HEADROOM_GB, MARGIN_GB, headroom

__all__ = ["HEADROOM_GB", "KNOWN_CONFIGS", "Architecture", "audio_tokens"]

GB = 1e9
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
    main at 64bb085, which loaded bf16 weights and let AdamW update them in place (issue #33's runs)."""
    lora_merged_sampling: bool = True
    """This code: the rollout samples with LoRA's adapters merged into the bf16 weights
    (:mod:`autagent.policies.lm.merged`).  False: the adapters ran unmerged beside the base (the code
    up to and including the ``make gpu-check`` runs at 5def832)."""


CURRENT = Runtime()
MAIN_64BB085 = Runtime(bf16_masters=False, lora_merged_sampling=False)
BEFORE_MERGED_SAMPLING = Runtime(lora_merged_sampling=False)
"""The code ``make gpu-check`` ran at 5def832 (gpu_check.json's runs that record no runtime)."""
HEAD_TILE = 4096
"""Tokens a tile of TRL's fused LM head projects at once (``kernels/chunked_logprob.TOKEN_CHUNK_SIZE``)."""
MERGE_BYTES = 14
"""Bytes a weight element while one adapted linear is merged or unmerged (:func:`autagent.policies.lm.
merged.merge_exactly`): its fp32 delta (4), the fp32 sum (4), the merged bf16 weight (2), the round
trip's bf16 result (2) and the mask of the weights it would not restore (1), rounded up."""


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
    lora: object = None
    """The :class:`~autagent.policies.lm.config.LoRAConfig` (targets, dropout), None without LoRA."""
    lora_merged: bool = True
    """Sampling with the adapters merged (:attr:`Runtime.lora_merged_sampling`)."""

    @property
    def autocast(self) -> bool:
        """bf16 autocast over fp32 weights: fp32 masters without DeepSpeed or LoRA (the residual stream,
        the checkpointed layer inputs and the keys are then fp32: :meth:`Architecture.residual_bytes`)."""
        return self.bf16 and self.stage is None and self.lora_parameters is None and self.masters


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

    def fits(self, gpu_gb: float, headroom_gb: float | None = None) -> bool:
        """Whether the peak and the headroom (measured, :func:`.terms.headroom`) fit the card."""
        return self.total / GB + _headroom(headroom_gb) <= gpu_gb

    def overflow(self, gpu_gb: float, headroom_gb: float | None = None) -> str | None:
        """Where the plan first exceeds the card (less the headroom): the phase and the item whose
        bytes take it past; None when it fits."""
        budget = (gpu_gb - _headroom(headroom_gb)) * GB
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


def _headroom(gb: float | None) -> float:
    return headroom().gb if gb is None else gb


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
    autocast = lm.bf16 and not deepspeed and not lm.lora and runtime.bf16_masters
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
        # the rollout's own choice (decoding.static_cache_kwargs): a longer prompt, or autocast, takes the dynamic cache
        static_cache_tokens=rollout.max_prompt_tokens
        if rollout.cache == "static" and prompt <= rollout.max_prompt_tokens and not autocast
        else None,
        checkpointing=lm.gradient_checkpointing,
        reasoner=reasoner,
        reasoner_bytes=r_bytes,
        reasoner_batch=r_batch,
        reasoner_tokens=r_tokens,
        lora=lm.lora,
        lora_merged=runtime.lora_merged_sampling and rollout.merge_adapters,
    )


def plan_of(s: Setup, fitted: dict | None = None, margin: bool = True) -> Plan:
    """The per-rank plan of a :class:`Setup`: every phase of steps 1 and 2, item by item.  ``fitted``
    replaces the fitted terms' values (:data:`.terms.FITTED`: a refit without one run);
    ``margin=False`` leaves out :data:`.terms.MARGIN_GB` (the fit is made without it)."""
    fit = {name: term.gb for name, term in FITTED.items()} | (fitted or {})
    keep, grads, moments, optimizer = _held(s)
    cast, cast_training = _autocast_copies(s)

    def unattributed(phase: str) -> list:
        """The fitted allowances (:data:`.terms.FITTED`): what every phase holds beyond the
        counted items, and the phase's own beyond that."""
        extra = [] if phase == "between" else [(f"unattributed ({phase})", fit[f"unattributed ({phase})"] * GB)]
        fitted_items = [
            (name, gb, "fitted") for name, gb in [("unattributed, held", fit["unattributed, held"] * GB), *extra]
        ]
        return fitted_items + [("margin", MARGIN_GB * GB, "chosen: plan_terms.MARGIN_GB")] * margin

    sampling = [(m, items + unattributed("sampling")) for m, items in _sampling(s, cast)]
    rewards = [(m, items + unattributed("rewards")) for m, items in _rewards(s)]
    update = [(m, items + unattributed("update")) for m, items in _update(s, fit, grads, cast_training)]
    plan = Plan(setup=s)
    for step in (1, 2):
        persistent = keep + (moments if step == 2 else [])
        plan.phases[(step, "sampling")] = [(m, persistent + items) for m, items in sampling]
        plan.phases[(step, "rewards")] = [(m, persistent + items) for m, items in rewards]
        plan.phases[(step, "update")] = [(m, persistent + items) for m, items in update]
        plan.phases[(step, "optimizer")] = [
            # AdamW allocates its moments in step 1's "step"; the moments before it exist from step 2 on
            (m, keep + (moments if step == 2 or m == "step" else []) + grads + items + unattributed("optimizer"))
            for m, items in optimizer
        ]
        plan.phases[(step, "between")] = [("after the step", keep + moments + unattributed("between"))]
    return plan


def _shards(s: Setup, applies: bool) -> int:
    """What ZeRO divides a term by: the ranks where it shards it, else 1."""
    return s.ranks if applies else 1


def _b16(s: Setup) -> int:
    """Bytes of a frozen weight, an activation, a KV entry."""
    return 2 if s.bf16 else 4


def _held(s: Setup) -> tuple[list, list, list, list]:
    """What the run holds: (kept through the run; the gradients, alive from the first micro-batch's backward
    to the end of the optimizer step; AdamW's moments, from step 1's optimizer step on; the optimizer step's
    moments as (moment, items besides those))."""
    p, stage, lora, b16 = s.arch.parameters, s.stage, s.lora_parameters, _b16(s)
    trained = lora if lora is not None else p
    keep: list = []
    grads: list = []
    moments: list = []
    optimizer: list = []
    if lora is not None:
        keep.append(("frozen base", b16 * p / _shards(s, stage == 3), f"{p / 1e9:.2f} B x {b16} bytes"))
    if stage is None:
        w = 4 if (s.masters or not s.bf16 or lora is not None) else 2
        name = "LoRA adapters" if lora is not None else "policy weights"
        kind = "fp32" if lora is not None else "fp32 masters" if w == 4 and s.bf16 else "bf16, updated in place"
        kind = kind if s.bf16 else "fp32"
        keep.append((name, w * trained, f"{trained / 1e9:.3f} B x {w} bytes ({kind})"))
        grads.append(("gradients", w * trained, f"{w} bytes a trained parameter"))
        moments.append(("AdamW moments", 2 * w * trained, f"2 x {w} bytes a trained parameter"))
        optimizer.append(("step", []))
    else:
        ranks1, ranks2 = _shards(s, stage >= 1), _shards(s, stage >= 2)
        if lora is None:
            keep.append(("policy weights (bf16, flat)", 2 * p / _shards(s, stage == 3), "2 bytes a parameter"))
        else:
            keep.append(("LoRA adapters (bf16)", 2 * trained, "2 bytes a trained parameter"))
        keep.append(("DeepSpeed fp32 master partition", 4 * trained / ranks1, "4 bytes / ranks"))
        moments.append(("AdamW moments (fp32 partition)", 8 * trained / ranks1, "8 bytes / ranks"))
        grads.append(("gradient partition (bf16)", 2 * trained / ranks2, f"2 bytes{' / ranks' * (stage >= 2)}"))
        fp32_grads = ("fp32 gradient partition", 4 * trained / ranks1, "4 bytes / ranks, in the step")
        flat = ("its flat bf16 copy", 2 * trained / ranks1, "2 bytes / ranks, flattened before the fp32 copy")
        optimizer += [("flattening the gradients", [flat, fp32_grads]), ("step", [fp32_grads])]
    if s.beta > 0 and lora is None:
        keep.append(("reference model", b16 * p / _shards(s, stage == 3), f"frozen, {b16} bytes a parameter"))
    if s.reasoner is not None:
        r = s.reasoner
        keep.append(("reasoner weights", r.parameters * s.reasoner_bytes, f"{r.parameters / 1e9:.2f} B in process"))
    return keep, grads, moments, optimizer


def _autocast_copies(s: Setup) -> tuple[list, list]:
    """Autocast's bf16 copies of the fp32 weights its ops cast, cached until the context exits, in
    inference and in training: not the token embeddings (an embedding lookup is not cast); in training not
    the LM head either (TRL's fused head casts it a vocabulary chunk at a time)."""
    if not s.autocast:
        return [], []
    p, embedding = s.arch.parameters, s.arch.vocab * s.arch.hidden
    return (
        [("autocast's bf16 weight copies", 2 * (p - embedding), "2 bytes a weight autocast casts")],
        [("autocast's bf16 weight copies", 2 * (p - 2 * embedding), "the same but the LM head")],
    )


def _sampling(s: Setup, cast: list) -> list:
    """The rollout's moments: the prefill, the end of decoding and, with merged LoRA, the merging."""
    a, b16, lora = s.arch, _b16(s), s.lora_parameters
    res = a.residual_bytes(b16, s.autocast)
    rows, prompt, total_tokens = s.generation_rows, s.prompt_tokens, s.prompt_tokens + s.completion_tokens
    how = f"{rows} rows"
    # the keys after RoPE are in the residual stream's dtype, and a dynamic cache holds the values in the keys'
    key = res
    if s.static_cache_tokens is not None:
        full = a.kv_cache_bytes(rows, s.static_cache_tokens + s.completion_tokens, b16)
        prefill_kv = end_kv = [
            ("static KV cache", full, f"{how} x {s.static_cache_tokens + s.completion_tokens} tokens")
        ]
    else:
        prefill_kv = [("KV cache of the prompts", a.kv_cache_bytes(rows, prompt, key), f"{how} x {prompt} tokens")]
        end_kv = [
            ("KV cache, prompt + completion", a.kv_cache_bytes(rows, total_tokens, key), f"{how} x {total_tokens}"),
            ("one layer's keys, copied as they grow", rows * total_tokens * a.kv_dim * key, "torch.cat"),
        ]
    embeds = []
    if s.prompt_logits == "last":
        embeds = [("prompt embeddings", rows * prompt * a.hidden * res, f"{how} x {prompt} x {a.hidden}")]
    positions = prompt if s.prompt_logits == "all" else 1
    logits = [("prompt logits", rows * positions * a.vocab * b16, f"{how} x {positions} positions x {a.vocab}")]
    if s.bf16 and s.stage is None:  # accelerate's autocast wrapper returns fp32 outputs
        logits.append(("their fp32 copy", rows * positions * a.vocab * 4, "accelerate's convert_outputs_to_fp32"))
    working = [("one layer's working set", a.layer_inference_bytes(rows, prompt, b16, s.autocast), f"{how} x {prompt}")]
    if lora is not None and not s.lora_merged:
        working.append(("unmerged adapters' working set", a.lora_inference_bytes(rows, prompt, s.lora), "fp32"))
    prefill = max(working, logits, key=lambda items: sum(b for _, b, _ in items))
    sampling = [("prefill", cast + embeds + prefill_kv + prefill), ("decoding", cast + embeds + end_kv)]
    if lora is not None and s.lora_merged:
        widest = max(o * i for i, o in a.adapted(s.lora))
        merging = ("merging the adapters", MERGE_BYTES * widest, f"{MERGE_BYTES} bytes x the widest adapted weight")
        sampling.append(("merging the adapters", [merging]))
    return sampling


def _rewards(s: Setup) -> list:
    """The rewards' moments: the reference model's log-probabilities (beta > 0), the reasoner in process."""
    micro, sequence = s.micro_rows, s.prompt_tokens + s.completion_tokens
    rewards: list = [("rewards", [])]
    if s.beta > 0:
        ref = s.arch.layer_inference_bytes(micro, sequence, _b16(s))
        rewards.append(("reference log-probs", [("reference forward", ref, f"{micro} rows x {sequence}, no gradient")]))
    if s.reasoner is not None:
        kv = s.reasoner.kv_cache_bytes(s.reasoner_batch, s.reasoner_tokens, s.reasoner_bytes)
        rewards.append(("reasoner", [("reasoner KV cache", kv, f"{s.reasoner_batch} x {s.reasoner_tokens} tokens")]))
    return rewards


def _update(s: Setup, fit: dict, grads: list, cast_training: list) -> list:
    """One micro-batch's forward end and backward, every gradient alive."""
    a, b16, lora, autocast = s.arch, _b16(s), s.lora_parameters, s.autocast
    res = a.residual_bytes(b16, autocast)
    micro, sequence = s.micro_rows, s.prompt_tokens + s.completion_tokens
    mhow = f"{micro} rows x {sequence} tokens"
    tower = lora is None  # a frozen tower (LoRA on the decoder) keeps nothing for the backward
    audio_inputs = a.audio_layers * micro * AUDIO_FRAMES * a.audio_dim * res if tower else 0
    layer_bytes = a.layer_training_bytes(micro, sequence, b16, autocast)
    if lora is not None:
        layer_bytes += a.lora_training_bytes(micro, sequence, s.lora)
    # outside the checkpointed layers: the decoder's final norm keeps its input and output (fp32 under autocast:
    # 8 h bytes a token; else the input, its fp32 upcast and the output: 6 h in 16 bits); the audio tower's
    # convolutional stem keeps conv1's and conv2's outputs and GELU's (3,000 and 1,500 frames) for the tower
    compute = 2 if s.bf16 else 4
    outside = micro * sequence * a.hidden * (8 if autocast else 3 * b16)
    outside += micro * a.audio_dim * (2 * 2 * AUDIO_FRAMES + AUDIO_FRAMES) * compute if tower else 0
    # and the tower's final LayerNorm its input and output, the projector the cast of its (pooled) input
    outside += micro * a.audio_dim * AUDIO_FRAMES * (2 * res + compute / 2) if tower else 0
    saved_outside = [("activations outside the layers", outside, "the final norms; the audio tower's stem")]
    if s.checkpointing:
        saved = [("decoder layer inputs", a.layers * micro * sequence * a.hidden * res, f"{a.layers} layers, {mhow}")]
        if tower:
            saved.append(("audio tower layer inputs", audio_inputs, f"{a.audio_layers} layers x {AUDIO_FRAMES} frames"))
        k = fit["backward factor"]
        layer = [("one layer's backward", k * layer_bytes, f"{k:g} x one layer's working set: recomputed + gradients")]
    else:
        # an encoder layer keeps its two LayerNorms' inputs and outputs, q, k, v, the attention output, fc1 and GELU
        audio_all = a.audio_layers * micro * AUDIO_FRAMES * (16 * a.audio_dim + 4 * a.audio_ffn) * b16 / 2
        saved = [("every layer's activations", a.layers * layer_bytes, mhow)]
        if tower:
            saved.append(("audio tower activations", audio_all, f"{a.audio_layers} layers x {AUDIO_FRAMES} frames"))
        layer = [("one layer's gradients", layer_bytes, "")]
    tile = HEAD_TILE * 32768 * 2 + 32768 * a.hidden * 2  # TRL kernels/chunked_logprob.py: mm_buf, a weight chunk
    copy = 2 if b16 == 2 and not autocast else 0  # grad_weight.to(weight.dtype): a copy only of bf16 weights
    head_grad = (a.vocab * a.hidden * (4 + copy) if lora is None else 0) + tile
    head = [
        ("fused LM head's backward", head_grad, f"fp32 weight gradient{' + its bf16 copy' * bool(copy)} + one tile")
    ]
    head_forward = [("fused LM head's forward", tile, f"one {HEAD_TILE} x 32768 tile and a weight chunk, in bf16")]
    buckets = []
    if s.stage is not None and s.stage >= 2:
        count = 2 if s.overlap_comm else 1
        buckets.append(("reduce buckets", count * s.reduce_bucket * 2, f"{count} x {s.reduce_bucket:.3g} elements"))
    saved += saved_outside
    return [
        ("forward end", grads + buckets + cast_training + saved + head_forward),
        ("backward", grads + buckets + saved + max(layer, head, key=lambda items: sum(b for _, b, _ in items))),
    ]


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

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
from pathlib import Path

from .items import _autocast_copies, _held, _rewards, _sampling, _update
from .setup import (
    BEFORE_MERGED_SAMPLING,
    CURRENT,
    GB,
    HEAD_TILE,
    MAIN_64BB085,
    MERGE_BYTES,
    PHASES,
    PROMPT_TEXT_TOKENS,
    RECORD_TOKENS,
    Plan,
    Runtime,
    Setup,
)
from .shapes import KNOWN_CONFIGS, TOOL_PARAMETERS, Architecture, audio_tokens
from .terms import FITTED, HEADROOM_GB, MARGIN_GB

__all__ = [  # Setup, Runtime, Plan and the constants live in .setup, the phases' items in .items
    "BEFORE_MERGED_SAMPLING",
    "CURRENT",
    "GB",
    "HEADROOM_GB",
    "HEAD_TILE",
    "KNOWN_CONFIGS",
    "MAIN_64BB085",
    "MERGE_BYTES",
    "PHASES",
    "Architecture",
    "Plan",
    "Runtime",
    "Setup",
    "audio_tokens",
    "plan_of",
    "plan_training",
    "setup_of",
]


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

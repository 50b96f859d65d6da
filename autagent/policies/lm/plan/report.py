"""What ``autagent plan`` prints and ``autagent train`` checks: the plan's table per phase and step,
the verdict on a card, and when a run does not fit, the item that overflows and the nearest settings
that fit (:mod:`.arithmetic` holds the arithmetic)."""

from __future__ import annotations

import dataclasses

from ..config import LoRAConfig
from .arithmetic import GB, PHASES, Plan, Setup, plan_of, plan_training
from .terms import headroom


def alternatives(setup: Setup) -> list[tuple[str, Setup]]:
    """Single changes that lower the peak, nearest first."""
    out = []
    rows = setup.generation_rows // 2
    while rows >= 1:
        out.append((f"policy.lm.generation_batch_size: {rows}", dataclasses.replace(setup, generation_rows=rows)))
        rows //= 2
    if setup.prompt_logits == "all":
        out.append(("policy.lm.rollout.prompt_logits: last", dataclasses.replace(setup, prompt_logits="last")))
    if setup.reasoner is not None:
        out.append(("the reasoner served apart (reasoner.kind: openai)", dataclasses.replace(setup, reasoner=None)))
    if setup.micro_rows > 1:
        half = setup.micro_rows // 2
        label = f"policy.lm.per_device_train_batch_size: {half} with twice the gradient_accumulation_steps"
        out.append((label, dataclasses.replace(setup, micro_rows=half)))
    if not setup.checkpointing:
        out.append(("policy.lm.gradient_checkpointing: true", dataclasses.replace(setup, checkpointing=True)))
    if setup.lora_parameters is None:
        lora = LoRAConfig()
        changed = dataclasses.replace(setup, lora_parameters=setup.arch.lora_parameters(lora), lora=lora)
        out.append(("policy.lm.lora: {r: 16} (LoRA)", changed))
    if setup.ranks > 1 and setup.stage is not None and setup.stage < 3:
        label = "DeepSpeed ZeRO-3 (zero_optimization.stage: 3, as in experiments/accelerate/zero3.json)"
        out.append((label, dataclasses.replace(setup, stage=3)))
    return out


def nearest_fits(setup: Setup, gpu_gb: float, most: int = 3) -> list[str]:
    """Up to ``most`` settings that fit the card: single changes first, then pairs of them."""
    options = alternatives(setup)
    found = [label for label, changed in options if plan_of(changed).fits(gpu_gb)]
    for i, (first, one) in enumerate(options if not found else []):
        for second, other in options[i + 1 :]:
            changes = {f.name: getattr(other, f.name) for f in dataclasses.fields(other)}
            changes = {k: v for k, v in changes.items() if v != getattr(setup, k)}
            if plan_of(dataclasses.replace(one, **changes)).fits(gpu_gb):
                found.append(f"{first} and {second}")
    return found[:most]


def table(plan: Plan, gpu_gb: float | None = None) -> str:
    """The plan as markdown: each phase's peak in steps 1 and 2 with what it adds to the items held
    through the run, those items, and the verdict on a ``gpu_gb`` card."""
    lines = ["| phase (its fullest moment) | step 1 GB | step 2 GB | what it adds, step 2 (GB) |", "|---|---|---|---|"]
    held = {item for item, _, _ in plan.phases[(2, "between")][0][1]}
    for phase in PHASES:
        one, two = plan.peak(1, phase), plan.peak(2, phase)
        added = ", ".join(f"{item} {b / GB:.1f}" for item, b, _ in two[2] if item not in held and b) or "-"
        lines.append(f"| {phase} ({two[1]}) | {one[0] / GB:.1f} | {two[0] / GB:.1f} | {added} |")
    worst = max(((plan.peak(s, ph)[0], s, ph) for s, ph in plan.phases), key=lambda t: t[0])
    lines.append(f"| **peak per rank** | | **{worst[0] / GB:.1f}** | step {worst[1]}, {worst[2]} |")
    lines += ["", "| held through the run | GB | how |", "|---|---|---|"]
    for item, nbytes, how in plan.phases[(2, "between")][0][1]:
        since = " (from step 1's optimizer step)" if "moments" in item else ""
        lines.append(f"| {item}{since} | {nbytes / GB:.1f} | {how} |")
    if gpu_gb is not None:
        lines += ["", verdict(plan, gpu_gb)]
    return "\n".join(lines + [""] + [f"* {n}" for n in plan.notes])


def verdict(plan: Plan, gpu_gb: float) -> str:
    room = headroom()
    keeping = f"keeping {room.gb:g} GB free ({room.source})"
    if plan.fits(gpu_gb):
        spare = gpu_gb - room.gb - plan.total / GB
        return f"On a {gpu_gb:g} GB card, {keeping}: **fits**, with {spare:.1f} GB to spare."
    nearest = nearest_fits(plan.setup, gpu_gb)
    return f"On a {gpu_gb:g} GB card, {keeping}: **does NOT fit**: {plan.overflow(gpu_gb)}. " + (
        f"Nearest settings that fit: {'; or '.join(nearest)}." if nearest else "No single or paired change fits."
    )


def main_plan(config, gpu_gb: float | None, prompt_tokens: int | None = None) -> tuple[str, bool]:
    """The table ``autagent plan`` prints, and whether the run fits ``gpu_gb`` (True without a size)."""
    if config.policy.kind != "lm":
        return "the router trains on a CPU in a few hundred MB: no GPU plan is needed", True
    plan = plan_training(config, prompt_tokens)
    return table(plan, gpu_gb), gpu_gb is None or plan.fits(gpu_gb)


def refusal(config, gpu_gb: float) -> str | None:
    """Why ``autagent train`` should not start this LM run on a ``gpu_gb`` card, or None when the plan
    says it fits (or cannot size the model)."""
    try:
        plan = plan_training(config)
    except ValueError:
        return None
    return None if plan.fits(gpu_gb) else f"the memory plan says this run will not fit: {verdict(plan, gpu_gb)}"

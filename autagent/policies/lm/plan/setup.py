"""What the memory plan (:mod:`.arithmetic`) is made of: a run's :class:`Setup` (everything the arithmetic
reads), the :class:`Runtime` of the code a record ran, the :class:`Plan` (each phase's moments and their
items) and the constants the items count with."""

from __future__ import annotations

from dataclasses import dataclass, field

from .shapes import Architecture
from .terms import headroom

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

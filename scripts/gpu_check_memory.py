"""``make gpu-check``'s memory measure (:mod:`gpu_check`): each phase's peak (sampling, rewards, update,
optimizer step, between steps) of each step, reset at every boundary, beside the figure ``autagent plan``
gives for the same phase; and the phase boundaries, where each rollout's seconds and decoding steps are
timed too."""

from __future__ import annotations

import time


class PhaseMeter:
    """Memory per (step, phase), reset at each boundary, the largest kept (CUDA; nothing on a CPU):

    * ``measured_gb``: ``max_memory_allocated``, what the plan models;
    * ``reserved_gb``: ``max_memory_reserved``, what the caching allocator held for it (its reserve and
      fragmentation on top);
    * ``card_gb``: the card's use at that peak: ``reserved_gb`` plus what the card holds outside the
      allocator (``mem_get_info``'s used memory less ``memory_reserved`` at the boundary: the CUDA
      context, cuBLAS and NCCL buffers).

    ``card_gb - measured_gb`` is the headroom a plan needs beyond its peak
    (:func:`autagent.policies.lm.plan.terms.headroom`).
    ``cuda`` is ``torch.cuda`` or a stand-in with the same five functions (the tests')."""

    FIGURES = ("measured_gb", "reserved_gb", "card_gb")

    def __init__(self, on_cuda: bool, cuda=None):
        import torch

        self.cuda, self.on, self.step, self.phase, self.peaks = cuda or torch.cuda, on_cuda, 0, None, {}

    def figures(self, allocated: float, reserved: float) -> dict:
        free, total = self.cuda.mem_get_info()
        outside = (total - free) - self.cuda.memory_reserved()
        return {"measured_gb": allocated / 1e9, "reserved_gb": reserved / 1e9, "card_gb": (reserved + outside) / 1e9}

    def keep(self, key: str, figures: dict) -> None:
        old = self.peaks.get(key, {})
        self.peaks[key] = {name: max(old.get(name, 0.0), value) for name, value in figures.items()}

    def enter(self, phase: str | None) -> None:
        if self.on and self.phase is not None:
            self.cuda.synchronize()
            figures = self.figures(self.cuda.max_memory_allocated(), self.cuda.max_memory_reserved())
            self.keep(f"{self.step}/{self.phase}", figures)
        if self.on:
            self.cuda.reset_peak_memory_stats()
        self.phase = phase

    def allocated(self, phase: str) -> None:
        if self.on:
            self.peaks[f"{self.step}/{phase}"] = self.figures(self.cuda.memory_allocated(), self.cuda.memory_reserved())

    def rounded(self) -> dict:
        return {key: {name: round(value, 2) for name, value in figures.items()} for key, figures in self.peaks.items()}


def instrument(trainer, meter: PhaseMeter, timings: list, steps: list | None = None) -> None:
    """Phase boundaries: the rollout (sampling), until the first loss (rewards: reference log-probs and
    the reward function), the micro-batches (update), the optimizer step, after it (between)."""
    from transformers import TrainerCallback

    rollout, compute_loss = trainer.rollout_func, trainer._compute_loss

    def timed_rollout(prompts, owner):
        meter.enter("sampling")
        started = time.perf_counter()
        out = rollout(prompts, owner)
        chunks = -(-len(prompts) // trainer.autagent_lm.generation_batch_size)
        steps = max(len(ids) for ids in out["completion_ids"])
        timings.append(
            {
                "step": meter.step,
                "seconds": time.perf_counter() - started,
                "chunks": chunks,
                "decoding_steps": steps,
                "prompt_tokens": max(len(p) for p in out["prompt_ids"]),
            }
        )
        meter.enter("rewards")
        return out

    def measured_loss(model, inputs):
        if meter.phase == "rewards":
            meter.enter("update")
        return compute_loss(model, inputs)

    class Boundaries(TrainerCallback):
        started = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            meter.step = state.global_step + 1
            self.started = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            meter.enter("optimizer")

        def on_step_end(self, args, state, control, **kwargs):
            meter.enter(None)
            meter.allocated("between")
            if steps is not None:
                steps.append({"step": meter.step, "seconds": round(time.perf_counter() - self.started, 1)})

    trainer.rollout_func, trainer._compute_loss = timed_rollout, measured_loss
    trainer.add_callback(Boundaries())


def meter_peak(plan, step: int, phase: str, deepspeed: bool) -> float:
    """The plan's bytes for what the meter measures as ``phase``.  Under DeepSpeed the optimizer step runs
    inside the last micro-batch's backward (accelerate calls the engine's step there), so the meter's
    "update" holds the step's peak and its "optimizer" what is left after it: the plan's larger of
    update and optimizer step, and its between-steps figure."""
    if deepspeed and phase == "update":
        return max(plan.peak(step, "update")[0], plan.peak(step, "optimizer")[0])
    if deepspeed and phase == "optimizer":
        return plan.peak(step, "between")[0]
    return plan.peak(step, phase)[0]

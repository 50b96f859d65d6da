"""What the LM policy relies on in TRL's private API, checked where the trainer is built.

:func:`.trainer.trainer_class` overrides four private methods of TRL's ``GRPOTrainer`` and calls each
parent with the arguments below.  A TRL release that renames one, or changes its parameters, would
otherwise fail far from its cause (a method never called, or a ``TypeError`` deep inside a training
step); :func:`check` names the method, the parameters expected and found, the TRL installed and the one
this code ran with.  ``pyproject.toml`` pins that TRL (``tests/test_trl_contract.py`` holds the pin, the
wheels ``make gpu-check`` carries and :data:`TESTED` to one version).
"""

from __future__ import annotations

import inspect

TESTED = "1.16.0"
"""The TRL the LM path ran with: the CPU suite, ``make rehearse`` and ``make gpu-check`` on an H100."""

OVERRIDDEN = {
    # method -> the parameters (after self) the override receives and passes on to TRL's, in order
    "_generate_and_score_completions": ("inputs",),
    "_calculate_rewards": ("inputs", "prompts", "completions", "completion_ids_list"),
    "_compute_loss": ("model", "inputs"),
    "_get_per_token_logps_and_entropies": (
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "compute_entropy",
        "compute_aux_loss",
    ),
}
OPEN_ENDED = {"_get_per_token_logps_and_entropies"}
"""Methods whose further keyword parameters the override absorbs (TRL's image inputs: ``**_image_inputs``)."""
CONSTRUCTOR = ("rollout_func", "peft_config")
"""Keyword parameters of ``GRPOTrainer.__init__`` :func:`.trainer.build_grpo_trainer` passes."""


def problems(grpo_trainer=None) -> list[str]:
    """What of :data:`OVERRIDDEN` and :data:`CONSTRUCTOR` ``grpo_trainer`` (TRL's ``GRPOTrainer`` by
    default) lacks or declares otherwise; empty when the overrides fit it."""
    if grpo_trainer is None:
        from trl import GRPOTrainer as grpo_trainer
    found = []
    for name, expected in OVERRIDDEN.items():
        method = getattr(grpo_trainer, name, None)
        if not callable(method):
            found.append(f"GRPOTrainer.{name} is missing")
            continue
        params = tuple(inspect.signature(method).parameters)[1:]
        params = params[: len(expected)] if name in OPEN_ENDED else params
        if params != expected:
            found.append(
                f"GRPOTrainer.{name} takes ({', '.join(params)}), the override expects ({', '.join(expected)})"
            )
    init = inspect.signature(grpo_trainer.__init__).parameters
    found += [f"GRPOTrainer.__init__ has no {name}=" for name in CONSTRUCTOR if name not in init]
    return found


def check(grpo_trainer=None) -> None:
    """Raise a ``RuntimeError`` naming every mismatch with the installed TRL, before a trainer is built."""
    found = problems(grpo_trainer)
    if found:
        import trl

        raise RuntimeError(
            f"TRL {trl.__version__} does not match what autagent's LM policy overrides (it ran with TRL {TESTED}, "
            f"which pyproject.toml pins): {'; '.join(found)}. Install trl=={TESTED}, or update "
            "autagent/policies/lm/trainer.py's overrides and trl_contract.OVERRIDDEN together."
        )

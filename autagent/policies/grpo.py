"""The GRPO objective, written once, named after the paper's equations.

For a group of G tool subsets z_1..z_G sampled for one query from π_old, with rewards r_i:

* advantage, three readings of the paper (``grpo.advantage``):

  - ``group`` (Eq. 2/3): A_i = (r_i − mean_group(r)) / (std_group(r) + ε).  The differential reward
    is the binary one minus 1[y_base = y*], a constant within a group, so under this estimator the
    two rewards give *identical* advantages (tested);
  - ``reward`` (Algorithm 1, line 11): A_i = r_i.  The differential reward is its own baseline:
    on a query the reasoner already answers, a subset that keeps it right gets 0 and one that
    breaks it gets −1, where the binary reward gives +1 and 0;
  - ``batch``: (r_i − mean_batch(r)) / (std_batch(r) + ε), over every completion of the step;
  - ``centered``: A_i = r_i − mean_group(r), Eq. 2 without its division (Dr. GRPO's reading, TRL's
    ``scale_rewards="none"``).  Within a group it compares replies as ``group`` does (the two rewards
    again give identical advantages), but a group whose replies differ only by the tool price keeps that
    difference at the price's size, where ``group`` blows it up to a full-size advantage (docs/history.md:
    the router, and the text LM policy of issue 65, learned to call nothing under ``group`` and a price).

* credit (``policy.router.credit``, router only): ``subset`` gives the whole sampled subset one advantage, as
  the paper does; ``tool`` gives each tool decision its own, the counterfactual difference
  A_{i,t} = r(z_i) − r(z_i with tool t flipped), and the objective below runs on the per-tool log
  probabilities.  The reasoner answers the flipped subsets too (T more asks per draw, memoised), but a
  tool is then judged by what it changes, not by what the tools drawn beside it did.  The baseline
  term of the differential reward cancels in the difference, so under this credit the two rewards
  train the same policy.

* clipped surrogate (Eq. 4): min(ρ_i A_i, clip(ρ_i, 1−ε_c, 1+ε_c) A_i), ρ_i = π_θ(z_i)/π_old(z_i).
* KL to the reference (Eq. 5), the k3 estimator: π_ref/π_θ − log(π_ref/π_θ) − 1.

Loss = −mean_i [surrogate_i − β · KL_i].  The router's action is one subset, so this is TRL's
``grpo`` loss with a single "token"; the LM policy gets ``policy.lm.loss_type`` (default ``grpo``).

:class:`GRPOConfig` (``grpo:``) holds what both policies' trainers read; each policy's own training
settings sit in its section (``policy.router``, ``policy.lm``), as TRL's trainer configs extend the shared
``TrainingArguments``.  :data:`MOVED_KEYS` names the keys that left ``grpo:`` and the top level for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ADVANTAGES = ("group", "reward", "batch", "centered")

MOVED_KEYS = {
    "grpo.credit": "policy.router.credit",
    "grpo.objective": "policy.router.objective",
    "grpo.entropy_coef": "policy.router.entropy_coef",
    "grpo.learning_rate": "policy.router.learning_rate",
    "grpo.loss_type": "policy.lm.loss_type",
    "table": "policy.router.table",
}
"""Old key -> new key of the settings only one policy reads (issue 52).  A user's config or ``--set`` with an
old key is refused naming the new one (:func:`autagent.config.config_from_mapping`); a plugin's recorded
training config is migrated on read (:func:`autagent.config.migrate_moved`)."""


def moved_key(dotted: str) -> str | None:
    """The new name of ``dotted`` (``table.budget`` -> ``policy.router.table.budget``), or None if it did not move."""
    for old, new in MOVED_KEYS.items():
        if dotted == old or dotted.startswith(old + "."):
            return new + dotted[len(old) :]
    return None


@dataclass
class GRPOConfig:
    group_size: int = 6
    """G: tool subsets sampled per query."""
    temperature: float = 1.0
    """Sampling temperature of the policy."""
    clip_epsilon: float = 0.2
    """ε of the clipped ratio (Eq. 4)."""
    beta: float = 0.04
    """Weight of the KL penalty to the reference policy (Eq. 5)."""
    batch_size: int = 16
    """Queries per step (B)."""
    steps: int = 150
    """Optimiser steps (0, with ``policy.init_from``: the plugin started from, exported as it is)."""
    inner_epochs: int = 2
    """Optimisation passes over each batch (μ)."""
    max_grad_norm: float = 1.0
    """Gradient clipping."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    advantage_epsilon: float = 1e-4
    """ε added to the std in the normalised estimators."""
    advantage: str = "reward"
    """Advantage estimator: group (Eq. 2), reward (Algorithm 1: A = r), batch or centered (Eq. 2 without its
    division by the group's spread); see the module docstring."""

    def __post_init__(self):
        if self.group_size < 2:
            raise ValueError(f"grpo.group_size must be >= 2 (group-relative advantages), got {self.group_size}")
        if self.temperature <= 0:
            raise ValueError(f"grpo.temperature must be > 0, got {self.temperature}")
        if self.steps < 0:
            raise ValueError(f"grpo.steps must be >= 0, got {self.steps}")
        for name in ("batch_size", "inner_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"grpo.{name} must be >= 1, got {getattr(self, name)}")
        if self.clip_epsilon <= 0 or self.beta < 0:
            raise ValueError("grpo.clip_epsilon must be > 0 and grpo.beta >= 0")
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"grpo.advantage must be one of {list(ADVANTAGES)}, got {self.advantage!r}")


def group_advantages(rewards: torch.Tensor, epsilon: float = 1e-4) -> torch.Tensor:
    """Eq. 2 on a ``[B, G]`` reward tensor; zero-variance groups give zeros, not NaN."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, unbiased=False)
    advantages = (rewards - mean) / (std + epsilon)
    return torch.where(std > 0, advantages, torch.zeros_like(advantages))


def batch_advantages(rewards: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Mean and std over every completion of the batch; an all-equal batch gives zeros."""
    std = rewards.std(unbiased=False)
    if std == 0:
        return torch.zeros_like(rewards)
    return (rewards - rewards.mean()) / (std + epsilon)


def advantages(rewards: torch.Tensor, kind: str, epsilon: float = 1e-4) -> torch.Tensor:
    """The advantage of each of ``[B, G]`` rewards under estimator ``kind`` (group | reward | batch | centered)."""
    if kind == "group":
        return group_advantages(rewards, epsilon)
    if kind == "centered":
        return rewards - rewards.mean(dim=1, keepdim=True)
    if kind == "reward":
        return rewards.clone()
    if kind == "batch":
        return batch_advantages(rewards, epsilon)
    raise ValueError(f"unknown advantage estimator {kind!r}; choose one of {list(ADVANTAGES)}")


def clipped_surrogate(
    logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, clip_epsilon: float
) -> torch.Tensor:
    """Eq. 4, elementwise."""
    ratio = torch.exp(logp_new - logp_old)
    return torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - clip_epsilon, 1 + clip_epsilon) * advantages)


def kl_to_reference(logp_new: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Eq. 5, the k3 estimator, elementwise (>= 0)."""
    log_ratio = logp_ref - logp_new
    return torch.exp(log_ratio) - log_ratio - 1


def grpo_loss(
    logp_new, logp_old, logp_ref, advantages, clip_epsilon: float, beta: float, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict]:
    """−mean[surrogate − β·KL] (Eq. 4 and 5).  Without ``mask`` each element is one action (the router's
    subset).  With a ``[B, L]`` token ``mask`` the inputs are per token (the LM's completions, the
    advantage broadcast over a completion's tokens): each completion's masked mean, then the mean over
    completions, which is TRL's ``grpo`` loss (the paper's per-sequence mean)."""
    surrogate = clipped_surrogate(logp_new, logp_old, advantages, clip_epsilon)
    kl = kl_to_reference(logp_new, logp_ref)
    per_element = -(surrogate - beta * kl)
    if mask is None:
        loss = per_element.mean()
    else:
        mask = mask.to(per_element.dtype)
        loss = ((per_element * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    clipped = ((torch.exp(logp_new - logp_old) - 1).abs() > clip_epsilon).float().mean()
    return loss, {"kl": kl.mean().item(), "clip_fraction": clipped.item(), "surrogate": surrogate.mean().item()}

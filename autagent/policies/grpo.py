"""The GRPO objective, written once, named after the paper's equations.

For a group of G tool subsets z_1..z_G sampled for one query from π_old, with rewards r_i:

* advantage, three readings of the paper (``grpo.advantage``):

  - ``group`` (Eq. 2/3): A_i = (r_i − mean_group(r)) / (std_group(r) + ε).  The differential reward
    is the binary one minus 1[y_base = y*], a constant within a group, so under this estimator the
    two rewards give *identical* advantages (tested);
  - ``reward`` (Algorithm 1, line 11): A_i = r_i.  The differential reward is its own baseline:
    on a query the reasoner already answers, a subset that keeps it right gets 0 and one that
    breaks it gets −1, where the binary reward gives +1 and 0;
  - ``batch``: (r_i − mean_batch(r)) / (std_batch(r) + ε), over every completion of the step.

* credit (``grpo.credit``, router only): ``subset`` gives the whole sampled subset one advantage, as
  the paper does; ``tool`` gives each tool decision its own, the counterfactual difference
  A_{i,t} = r(z_i) − r(z_i with tool t flipped), and the objective below runs on the per-tool log
  probabilities.  The reasoner answers the flipped subsets too (T more asks per draw, memoised), but a
  tool is then judged by what it changes, not by what the tools drawn beside it did.  The baseline
  term of the differential reward cancels in the difference, so under this credit the two rewards
  train the same policy.

* clipped surrogate (Eq. 4): min(ρ_i A_i, clip(ρ_i, 1−ε_c, 1+ε_c) A_i), ρ_i = π_θ(z_i)/π_old(z_i).
* KL to the reference (Eq. 5), the k3 estimator: π_ref/π_θ − log(π_ref/π_θ) − 1.

Loss = −mean_i [surrogate_i − β · KL_i].  The router's action is one subset, so this is TRL's
``grpo`` loss with a single "token"; the LM policy gets ``grpo.loss_type`` (default ``grpo``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ADVANTAGES = ("group", "reward", "batch")
CREDITS = ("subset", "tool")
OBJECTIVES = ("sampled", "expected")
LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo")


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
    learning_rate: float = 3e-3
    """Router learning rate (the LM policy's is policy.lm.learning_rate, 1e-6 in the paper)."""
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
    """Advantage estimator: group (Eq. 2), reward (Algorithm 1: A = r) or batch; see the module docstring."""
    entropy_coef: float = 0.0
    """Router only: weight of a bonus on the mean per-tool Bernoulli entropy of the policy, which keeps
    a tool that helps on few queries (emotion, speakers) sampled; 0 is the paper's objective."""
    credit: str = "subset"
    """Router only: ``subset`` (the paper: one advantage per sampled subset) or ``tool`` (each tool's
    decision is credited with what flipping it changes in the reward; see the module docstring)."""
    objective: str = "sampled"
    """Router only: ``sampled`` (GRPO: G subsets drawn per query, the clipped ratio) or ``expected``
    (the exact expected reward over every subset, read from an answer table, with the exact KL:
    :mod:`autagent.policies.router.exact`; needs ``table.enabled``)."""
    loss_type: str = "grpo"
    """The LM policy's TRL loss: grpo (the paper's, per-sequence mean), dapo, dr_grpo or bnpo."""

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
        if self.entropy_coef < 0:
            raise ValueError(f"grpo.entropy_coef must be >= 0, got {self.entropy_coef}")
        if self.learning_rate <= 0 or self.clip_epsilon <= 0 or self.beta < 0:
            raise ValueError("grpo.learning_rate and grpo.clip_epsilon must be > 0, grpo.beta >= 0")
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"grpo.advantage must be one of {list(ADVANTAGES)}, got {self.advantage!r}")
        if self.credit not in CREDITS:
            raise ValueError(f"grpo.credit must be one of {list(CREDITS)}, got {self.credit!r}")
        if self.credit == "tool" and self.advantage != "reward":
            raise ValueError(
                f"grpo.credit: tool is its own baseline (r(z) - r(z with the tool flipped)); "
                f"it needs grpo.advantage: reward, got {self.advantage!r}"
            )
        if self.objective not in OBJECTIVES:
            raise ValueError(f"grpo.objective must be one of {list(OBJECTIVES)}, got {self.objective!r}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"grpo.loss_type must be one of {list(LOSS_TYPES)}, got {self.loss_type!r}")


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
    """The advantage of each of ``[B, G]`` rewards under estimator ``kind`` (group | reward | batch)."""
    if kind == "group":
        return group_advantages(rewards, epsilon)
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

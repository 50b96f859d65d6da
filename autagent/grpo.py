"""The GRPO objective, written once, named after the paper's equations.

For a group of G tool subsets z_1..z_G sampled for one query from π_old:

* advantage (Eq. 3):  A_i = (r_i − mean(r)) / (std(r) + ε); a group whose rewards are all equal
  carries no signal, and its advantages are exactly 0.
* clipped surrogate (Eq. 4): min(ρ_i A_i, clip(ρ_i, 1−ε_c, 1+ε_c) A_i), ρ_i = π_θ(z_i)/π_old(z_i).
* KL to the reference (Eq. 5), the unbiased k3 estimator: π_ref/π_θ − log(π_ref/π_θ) − 1.

Loss = −mean_i [surrogate_i − β · KL_i].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class GRPOConfig:
    group_size: int = 6  # G
    temperature: float = 1.0
    clip_epsilon: float = 0.2
    beta: float = 0.04  # KL weight
    learning_rate: float = 3e-3  # router default; the LM policy's is 1e-6 (paper)
    batch_size: int = 16  # queries per step
    steps: int = 150
    inner_epochs: int = 2  # optimisation passes over each batch (μ)
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    advantage_epsilon: float = 1e-4

    def __post_init__(self):
        if self.group_size < 2:
            raise ValueError(f"grpo.group_size must be >= 2 (group-relative advantages), got {self.group_size}")
        if self.temperature <= 0:
            raise ValueError(f"grpo.temperature must be > 0, got {self.temperature}")


def group_advantages(rewards: torch.Tensor, epsilon: float = 1e-4) -> torch.Tensor:
    """Eq. 3 on a ``[B, G]`` reward tensor; zero-variance groups give zeros, not NaN."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, unbiased=False)
    advantages = (rewards - mean) / (std + epsilon)
    return torch.where(std > 0, advantages, torch.zeros_like(advantages))


def clipped_surrogate(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
                      clip_epsilon: float) -> torch.Tensor:
    """Eq. 4, elementwise."""
    ratio = torch.exp(logp_new - logp_old)
    return torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - clip_epsilon, 1 + clip_epsilon) * advantages)


def kl_to_reference(logp_new: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Eq. 5, the k3 estimator, elementwise (>= 0)."""
    log_ratio = logp_ref - logp_new
    return torch.exp(log_ratio) - log_ratio - 1


def grpo_loss(logp_new, logp_old, logp_ref, advantages, clip_epsilon: float, beta: float) -> tuple[torch.Tensor, dict]:
    surrogate = clipped_surrogate(logp_new, logp_old, advantages, clip_epsilon)
    kl = kl_to_reference(logp_new, logp_ref)
    loss = -(surrogate - beta * kl).mean()
    clipped = ((torch.exp(logp_new - logp_old) - 1).abs() > clip_epsilon).float().mean()
    return loss, {"kl": kl.mean().item(), "clip_fraction": clipped.item(), "surrogate": surrogate.mean().item()}

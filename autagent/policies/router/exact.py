"""The exact objective over an answer table (``policy.router.objective: expected``).

GRPO estimates the gradient of the expected reward E_{z~π(·|x)}[r(x, z)] from G sampled subsets.  When
the reward of *every* subset of a query is known (the answer table, and its surrogate for the subsets
never asked), that expectation is a finite sum over the 2^T subsets and can be differentiated exactly:

    J(x) = Σ_z π(z | x) · r(x, z) − β · KL(π(· | x) ‖ π_ref(· | x)),
    π(z | x) = Π_t p_t^{z_t} (1 − p_t)^{1 − z_t},   KL = Σ_t KL(Bernoulli(p_t) ‖ Bernoulli(p_ref,t)),

so no step is spent on sampling noise and no draw repeats.  The differential reward's baseline term,
1[y_base = y*], is a constant of the query: Σ_z π(z | x) · c = c, so under this objective the
differential and the binary reward give the same gradient (the difference shows only in sampled GRPO).
"""

from __future__ import annotations

import torch
from torch import nn


def subset_matrix(num_tools: int) -> torch.Tensor:
    """``[2^T, T]`` 0/1 rows, in the order of :func:`autagent.policies.router.table.every_subset`."""
    if num_tools > 12:
        raise ValueError(f"policy.router.objective expected enumerates 2^T subsets: T <= 12 tools, got {num_tools}")
    rows = torch.cartesian_prod(*[torch.tensor([0.0, 1.0])] * num_tools) if num_tools > 1 else None
    return rows if rows is not None else torch.tensor([[0.0], [1.0]])


def expected_loss(
    logits: torch.Tensor,
    reference_logits: torch.Tensor,
    rewards: torch.Tensor,
    subsets: torch.Tensor,
    beta: float,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict]:
    """−mean over queries of J(x). ``logits``/``reference_logits`` ``[B, T]``, ``rewards`` ``[B, 2^T]``
    (the reward of each subset, tool price included), ``subsets`` ``[2^T, T]``; with ``mask`` ``[B, 2^T]``
    (1: a subset the reasoner answered) the expectation is over the masked subsets, π renormalised."""
    log_p, log_q = nn.functional.logsigmoid(logits), nn.functional.logsigmoid(-logits)
    log_pi = log_p @ subsets.T + log_q @ (1 - subsets).T  # [B, 2^T]
    if mask is None:
        expected = (log_pi.exp() * rewards).sum(-1)
    else:  # log-space renormalisation: the asked subsets' share of π can be tiny
        weights = torch.softmax(log_pi.masked_fill(mask <= 0, float("-inf")), dim=-1)
        expected = (weights * rewards).sum(-1)
    p = torch.sigmoid(logits)
    kl = (
        p * (log_p - nn.functional.logsigmoid(reference_logits))
        + (1 - p) * (log_q - nn.functional.logsigmoid(-reference_logits))
    ).sum(-1)
    loss = -(expected - beta * kl).mean()
    figures = {"expected_reward": expected.mean().item(), "kl": kl.mean().item(), "p_mean": p.mean().item()}
    return loss, figures

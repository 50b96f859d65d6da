"""The ``prior`` scorer: a per-kind prior from the question that the clip and the choices can override.

Why: on a real reasoner with a handful of training queries per question kind, a router over every input
learns no more than the question-only router does (docs/results/cascade.md): what a kind needs is
learnt from the question (a lookup), and the clip's and the choices' inputs mostly add variance.  This
scorer makes the lookup the starting point and the rest a bounded correction::

    l_t(x) = p_t(question) + L · tanh(o_t(question, choices, clip) / L)

p is a per-tool MLP over the question alone (the prior: with few queries a kind, the question names
the kind); o an MLP over every input whose output layer starts at zero, so training starts from the
prior and o grows only where the answers say a clip or a set of choices needs other tools than its
kind; L (``policy.router.override_limit``) bounds how far it can move a logit, so that it can flip a
tool the prior is unsure of (p = 0.27 → 0.9 takes 3.2) but a few odd clips cannot swamp a kind's
prior.  The question-only router remains the baseline that exposes a lookup.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .layers import mlp


class PriorScorer(nn.Module):
    def __init__(self, input_dim: int, config, num_tools: int, columns: dict | None):
        super().__init__()
        if not columns or "question" not in columns or len(columns) < 2:
            raise ValueError("the prior scorer needs the question and another input (choices or audio) in its columns")
        start, end = columns["question"]
        self.question = slice(start, end)
        self.limit = float(config.override_limit)
        self.prior = mlp(end - start, config.hidden, num_tools, config)
        self.override = mlp(
            input_dim, config.hidden, num_tools, dataclasses.replace(config, abstain=False, init_bias=0)
        )
        nn.init.zeros_(self.override[-1].weight)
        nn.init.zeros_(self.override[-1].bias)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[B, T]`` tool logits and the ``[B]`` call logit with ``abstain`` (the prior's), else None."""
        out = self.prior(features[:, self.question])
        tools, call = (out[:, :-1], out[:, -1]) if out.shape[1] > self.override[-1].out_features else (out, None)
        shift = self.override(features)
        return tools + self.limit * torch.tanh(shift / self.limit), call

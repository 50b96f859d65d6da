"""The router's building blocks, shared by its scorers (:mod:`.model`, :mod:`.prior`)."""

from __future__ import annotations

import torch
from torch import nn


def mlp(input_dim: int, hidden: int, num_tools: int, config) -> nn.Sequential:
    """LayerNorm, one hidden layer, a logit per tool (and the call logit with ``abstain``), every tool
    starting at ``init_bias``."""
    net = nn.Sequential(
        nn.LayerNorm(input_dim), nn.Linear(input_dim, hidden), nn.GELU(), nn.Linear(hidden, num_tools + config.abstain)
    )
    nn.init.constant_(net[-1].bias, config.init_bias)
    if config.abstain:
        nn.init.constant_(net[-1].bias[-1:], config.call_init)
    nn.init.normal_(net[-1].weight, std=0.01)
    return net


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 − eˣ) for x < 0, accurate at both ends (Mächler 2012)."""
    x = x.clamp(max=-1e-7)
    return torch.where(x > -0.6931, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))

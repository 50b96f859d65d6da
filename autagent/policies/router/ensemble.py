"""Several routers trained apart, selecting together (``policy.router.ensemble``).

Each member is its own GRPO run on the same queries, seeded ``seed · N + m``, so members differ only in
their initialisation and their draws.  On text like its training queries every member agrees; on text
unlike anything it trained on each one extrapolates in its own way, and averaging their tool
probabilities keeps only the calls most of them make (docs/history.md, "Ensembles").  Selection calls a
tool when the members' mean probability of calling it exceeds one half; training and its log-probabilities
stay per member.
"""

from __future__ import annotations

import torch
from torch import nn

from .model import Router


class RouterEnsemble(nn.Module):
    """``members`` routers of one config with the selection interface of :class:`Router`."""

    def __init__(self, members: list[Router]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one router")
        self.members = nn.ModuleList(members)

    @property
    def config(self):
        return self.members[0].config

    def set_tools(self, descriptions: torch.Tensor, learned=None) -> None:
        for member in self.members:
            member.set_tools(descriptions, learned)

    @torch.no_grad()
    def tool_probabilities(self, features: torch.Tensor) -> torch.Tensor:
        """``[B, T]``: the members' mean probability of calling each tool, as each selects. Every member
        keeps the same familiarity bank and cut (fitted on the same queries), so the unfamiliar inputs
        are blanked once for all of them."""
        features = self.members[0].blank_unfamiliar(features)
        return torch.stack([member.probabilities_as_given(features) for member in self.members]).mean(0)

    @torch.no_grad()
    def select(self, features: torch.Tensor) -> torch.Tensor:
        """Greedy subsets ``[B, T]``: each tool the members call with mean probability above one half."""
        return (self.tool_probabilities(features) > 0.5).float()


def build(input_dim: int, config, num_tools: int, descriptions=None, columns=None) -> Router | RouterEnsemble:
    """The router a config declares: one :class:`Router`, or ``config.ensemble`` of them."""
    if config.ensemble == 1:
        return Router(input_dim, config, num_tools, descriptions, columns)
    return RouterEnsemble([Router(input_dim, config, num_tools, descriptions, columns) for _ in range(config.ensemble)])

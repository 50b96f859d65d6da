"""How like its training queries an input is: the cosine to its nearest training query, and a cut.

Shared by the router's ``unfamiliar_fallback`` (which blanks unfamiliar choices before it selects) and
the plugin's back-off (:mod:`autagent.policies.router.backoff`, which lets the zero-shot head speak for
an unfamiliar question or choices).  An input's identity is its unit embedding (the question's, the
choices' mean); the cut is a low quantile of the dev queries' nearest-training cosine, so "unfamiliar"
means "less like anything in training than all but a share q of the held-out training-pool queries".
"""

from __future__ import annotations

import torch
from torch import nn


def identity(features: torch.Tensor, columns: tuple[int, int]) -> torch.Tensor:
    """``[B, d]`` unit rows of an input's columns ``(start, end)`` (a blanked row stays zero)."""
    start, end = columns
    return nn.functional.normalize(features[:, start:end].float(), dim=-1)


def nearest(features: torch.Tensor, columns: tuple[int, int], bank: torch.Tensor) -> torch.Tensor:
    """``[B]`` each query's cosine (input at ``columns``) to its nearest row of ``bank``."""
    return (identity(features, columns) @ bank.T).amax(-1)


def fit_bank(
    train: torch.Tensor, columns: tuple[int, int], share: float, dev: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training queries' distinct unit rows and the cut: the share-q quantile of the dev queries'
    cosine to their nearest training row (without dev, of each training row's to its nearest other)."""
    bank = torch.unique(identity(train, columns), dim=0)
    if dev is not None and len(dev):
        closest = nearest(dev, columns, bank)
    else:
        closest = (bank @ bank.T).fill_diagonal_(-2.0).amax(-1)
    return bank, torch.quantile(closest, float(share))

"""Selectors for the paper's baselines: fixed subsets, random subsets, and the zero-shot
"tools with descriptions" selector (question vs. tool description similarity, no training).

Each works over the run's tool library (``tools.enabled``), in its order.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np

from tools import get_tool

from ..reasoners.encoders import text_encoder


def all_subsets(tool_ids, max_size: int | None = None) -> list[tuple[str, ...]]:
    """Every subset of ``tool_ids`` up to ``max_size`` tools, the empty one first, by size then in order."""
    top = len(tool_ids) if max_size is None else min(max_size, len(tool_ids))
    return [s for k in range(top + 1) for s in itertools.combinations(tool_ids, k)]


class RandomSelector:
    """A uniformly random subset of the run's tools (each with probability 1/2), seeded per sample."""

    def __init__(self, tool_ids, seed: int = 0):
        self.tool_ids, self.seed = tuple(tool_ids), seed

    def select(self, sample) -> tuple[str, ...]:
        rng = np.random.default_rng([self.seed, zlib.crc32(sample.id.encode())])
        return tuple(t for t in self.tool_ids if rng.random() < 0.5)


class DescriptionSelector:
    """Zero-shot: tools whose description is among the most similar to the question (MiniLM).

    Picks every tool within ``margin`` of the best similarity, provided it reaches ``floor``;
    with no tool that similar it calls none.  Descriptions are encoded once, so a query costs one
    question embedding and one small matrix product whatever the size of the library.
    """

    def __init__(self, tool_ids, margin: float = 0.05, floor: float = 0.15, text_model: str | None = None):
        self.tool_ids = tuple(tool_ids)
        self.margin, self.floor = margin, floor
        self.text = text_encoder(text_model)
        self.descriptions = self.text.encode([get_tool(t).description for t in self.tool_ids])

    def select(self, sample) -> tuple[str, ...]:
        similarity = self.descriptions @ self.text.encode([sample.question])[0]
        best = float(similarity.max())
        return tuple(t for t, s in zip(self.tool_ids, similarity) if s >= best - self.margin and s >= self.floor)

"""Selectors for the paper's baselines: fixed subsets, random subsets, and the zero-shot
"tools with descriptions" selector (question vs. tool description similarity, no training)."""
from __future__ import annotations

import itertools
import zlib

import numpy as np

from tools import TOOL_IDS, get_tool


def all_subsets() -> list[tuple[str, ...]]:
    """The 2^6 subsets, the empty one first, by size then in the paper's order."""
    return [s for k in range(len(TOOL_IDS) + 1) for s in itertools.combinations(TOOL_IDS, k)]


class RandomSelector:
    """A uniformly random subset of the six tools (each tool with probability 1/2), seeded per sample."""

    def __init__(self, seed: int = 0):
        self.seed = seed

    def select(self, sample) -> tuple[str, ...]:
        rng = np.random.default_rng([self.seed, zlib.crc32(sample.id.encode())])
        return tuple(t for t in TOOL_IDS if rng.random() < 0.5)


class DescriptionSelector:
    """Zero-shot: tools whose description is among the most similar to the question (MiniLM).

    Picks every tool within ``margin`` of the best similarity, provided it reaches ``floor``;
    with no tool that similar it calls none.
    """

    def __init__(self, margin: float = 0.05, floor: float = 0.15, text_model: str | None = None):
        from ..encoders import text_encoder

        self.margin, self.floor = margin, floor
        self.text = text_encoder(text_model)
        self.descriptions = self.text.encode([get_tool(t).description for t in TOOL_IDS])

    def select(self, sample) -> tuple[str, ...]:
        similarity = self.descriptions @ self.text.encode([sample.question])[0]
        best = float(similarity.max())
        return tuple(t for t, s in zip(TOOL_IDS, similarity) if s >= best - self.margin and s >= self.floor)

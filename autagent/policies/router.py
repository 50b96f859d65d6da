"""The router policy: a small network from (question, audio) to a distribution over tool subsets.

Input: the question's MiniLM embedding (384) and the clip's global YAMNet profile (1044), both from
weights shipped in packages.  Output: one logit per tool; a subset z ⊆ {T1..T6} has probability
∏_k σ(l_k)^{z_k} (1 − σ(l_k))^{1−z_k}, so all 64 subsets, the empty one included, are actions.
Selection is greedy (σ(l_k) > 0.5) and takes milliseconds on CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from tools import TOOL_IDS


@dataclass
class RouterConfig:
    hidden: int = 128
    init_bias: float = -1.0  # start sparse: P(call a tool) ≈ 0.27, ~1.6 tools per query
    text_model: str | None = None  # None: shipped MiniLM
    audio_max_seconds: float = 30.0


class Featurizer:
    """(question, audio path) -> the router's input vector; memoised per text and per audio content."""

    def __init__(self, config: RouterConfig):
        from ..encoders import AudioEncoder, text_encoder

        self.text = text_encoder(config.text_model)
        self.audio = AudioEncoder(config.audio_max_seconds)
        self.dim = self.text.dim + AudioEncoder.dim

    def __call__(self, questions: list[str], audio_paths: list[str]) -> torch.Tensor:
        q = self.text.encode(list(questions))
        a = np.stack([self.audio.encode_path(p) for p in audio_paths])
        return torch.from_numpy(np.concatenate([q, a], axis=1))

    def of_samples(self, samples) -> torch.Tensor:
        """Features of each sample's question and clip, in order."""
        return self([s.question for s in samples], [s.audio for s in samples])

    def describe(self) -> dict:
        return {"text": self.text.name, "audio": "yamnet-int8-onnx global profile (mean+max probs, loudness, duration)"}


class Router(nn.Module):
    def __init__(self, input_dim: int, config: RouterConfig, num_tools: int = len(TOOL_IDS)):
        super().__init__()
        self.config = config
        self.net = nn.Sequential(nn.LayerNorm(input_dim), nn.Linear(input_dim, config.hidden), nn.GELU(),
                                 nn.Linear(config.hidden, num_tools))
        nn.init.constant_(self.net[-1].bias, config.init_bias)
        nn.init.normal_(self.net[-1].weight, std=0.01)

    def logits(self, features: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        return self.net(features) / temperature

    def log_prob(self, features: torch.Tensor, subsets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """``features [B, D]``, ``subsets [B, G, T]`` (0/1) -> ``[B, G]`` log π(z | x)."""
        logits = self.logits(features, temperature).unsqueeze(1)
        return -nn.functional.binary_cross_entropy_with_logits(logits.expand_as(subsets), subsets.float(),
                                                               reduction="none").sum(-1)

    @torch.no_grad()
    def sample(self, features: torch.Tensor, group_size: int, generator: torch.Generator,
               temperature: float = 1.0) -> torch.Tensor:
        """``[B, G, T]`` 0/1 subsets drawn from π(· | x)."""
        probs = torch.sigmoid(self.logits(features, temperature)).unsqueeze(1).expand(-1, group_size, -1)
        return torch.bernoulli(probs, generator=generator)

    @torch.no_grad()
    def select(self, features: torch.Tensor) -> torch.Tensor:
        """Greedy subsets ``[B, T]``: each tool whose probability exceeds one half."""
        return (self.logits(features) > 0).float()

    @torch.no_grad()
    def tool_probabilities(self, features: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(features))


def subset_ids(row) -> tuple[str, ...]:
    """A 0/1 row over tools -> the tool ids it selects, in the paper's order."""
    return tuple(t for t, on in zip(TOOL_IDS, row) if float(on) > 0.5)

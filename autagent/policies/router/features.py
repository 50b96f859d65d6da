"""The router's inputs: (question, choices, audio) -> one feature vector, on frozen shipped encoders."""

from __future__ import annotations

import re

import numpy as np
import torch

from tools.audio import AudioError

from ...reasoners.encoders import AudioEncoder, text_encoder
from .model import CHOICE_STATS, INPUTS, RouterConfig

NUMBER = re.compile(r"\d+(?:\.\d+)?")
WORD = re.compile(r"[\w#'-]+")


def contrast(choices) -> str:
    """The words that some but not all choices use, in order of first appearance ("" for one choice)."""
    bags = [WORD.findall(c.lower()) for c in choices]
    shared = set.intersection(*map(set, bags)) if bags else set()
    return " ".join(dict.fromkeys(w for bag in bags for w in bag if w not in shared))


def choice_statistics(choices, vectors: np.ndarray) -> np.ndarray:
    """How far apart the choices are: mean and min pairwise cosine; numeric spread (0 without numbers)."""
    n = len(vectors)
    if n >= 2:
        sims = (vectors @ vectors.T)[np.triu_indices(n, 1)]
        mean_sim, min_sim = float(sims.mean()), float(sims.min())
    else:
        mean_sim = min_sim = 1.0
    numbers = sorted(float(m) for c in choices for m in NUMBER.findall(c)[:1] if float(m) > 0)
    if len(numbers) >= 2:
        ratios = np.log(np.asarray(numbers[1:]) / np.asarray(numbers[:-1]))
        spread, closest, has = float(np.log(numbers[-1] / numbers[0])), float(ratios.min()), 1.0
    else:
        spread = closest = has = 0.0
    return np.array([mean_sim, min_sim, spread, closest, has], dtype=np.float32)


class Featurizer:
    """(question, choices, audio path) -> the router's input vector; memoised per text and per audio content."""

    def __init__(self, config: RouterConfig):
        self.config = config
        self.inputs = tuple(x for x in INPUTS if x in config.inputs)
        self.text = text_encoder(config.text_model)
        self.audio = AudioEncoder(config.audio_max_seconds) if "audio" in self.inputs else None
        self.audio_errors = 0
        self.choice_pools = (np.mean, np.std) if config.choice_spread else (np.mean,)
        """How the choices' embeddings are pooled: their mean, and with ``choice_spread`` their spread."""
        choices = self.text.dim * (len(self.choice_pools) + config.choice_contrast) + CHOICE_STATS
        sizes = {"question": self.text.dim, "choices": choices, "audio": AudioEncoder.dim}
        self.dim = sum(sizes[x] for x in self.inputs)
        ends = np.cumsum([sizes[x] for x in self.inputs]).tolist()
        self.columns = {x: (end - sizes[x], end) for x, end in zip(self.inputs, ends)}
        """Where each input sits in the feature vector: name -> (first column, end)."""

    def __call__(
        self, questions: list[str], audio_paths: list[str], choices: list | None = None, audio: bool = True
    ) -> torch.Tensor:
        """``[B, dim]`` features; with ``audio=False`` the clip's columns are zeros, not computed (for what
        reads only the text, such as the back-off's familiarity banks)."""
        parts = []
        if "question" in self.inputs:
            parts.append(self.text.encode(list(questions)))
        if "choices" in self.inputs:
            rows = []
            for options in choices or [()] * len(questions):
                vectors = self.text.encode(list(options)) if options else np.zeros((0, self.text.dim), np.float32)
                pooled = [
                    pool(vectors, axis=0) if len(vectors) else np.zeros(self.text.dim, np.float32)
                    for pool in self.choice_pools
                ]  # no choices: zeros (numpy warns on an empty mean)
                if self.config.choice_contrast:
                    pooled.append(self.text.encode([contrast(options)])[0])
                rows.append(np.concatenate([*pooled, choice_statistics(options, vectors)]))
            parts.append(np.stack(rows).astype(np.float32))
        if "audio" in self.inputs and audio:
            parts.append(np.stack([self.audio_profile(p) for p in audio_paths]))
        elif "audio" in self.inputs:
            parts.append(np.zeros((len(questions), self.audio.dim), dtype=np.float32))
        return torch.from_numpy(np.concatenate(parts, axis=1))

    def audio_profile(self, path: str) -> np.ndarray:
        """The clip's profile; a clip that cannot be read is all zeros (the router then decides from
        the text alone) and is counted in ``audio_errors``."""
        try:
            return self.audio.encode_path(path)
        except AudioError:
            self.audio_errors += 1
            return np.zeros(self.audio.dim, dtype=np.float32)

    def of_samples(self, samples, audio: bool = True) -> torch.Tensor:
        """Features of each sample's question, choices and (with ``audio``) clip, in order."""
        return self([s.question for s in samples], [s.audio for s in samples], [s.choices for s in samples], audio)

    def tool_descriptions(self, descriptions: list[str]) -> torch.Tensor:
        """``[T, dim]`` unit embeddings of tool descriptions (the ``tool_conditioned`` scorer's tool side)."""
        return torch.from_numpy(self.text.encode(list(descriptions)))

    def describe(self) -> dict:
        return {
            "text": self.text.describe(),
            "audio": AudioEncoder.describe() if self.audio else None,
            "inputs": list(self.inputs),
        }

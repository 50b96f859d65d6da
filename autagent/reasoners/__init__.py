"""Frozen reasoners behind one interface: ``answer(sample, records | None) -> reply``.

``embedded`` (offline, shipped weights), ``qwen2-audio`` (transformers, in process), ``openai``
(any OpenAI-compatible audio chat endpoint) and ``cascade`` (a text LM that knows the audio only
through tool records).  :func:`build_reasoner` wraps each in the answer cache.  Beside them,
:mod:`.tool_loop` is the loop in which a reasoner asks for tools itself (Audio-Maestro's), and
:mod:`.encoders` the frozen text and audio encoders that the embedded reasoner and the router share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import CachedReasoner, Reasoner, answer_key
from .cascade import CascadeReasoner, CascadeReasonerConfig
from .embedded import EmbeddedReasoner, EmbeddedReasonerConfig
from .openai_compat import OpenAIConfig, OpenAIReasoner
from .qwen2_audio import Qwen2AudioConfig, Qwen2AudioReasoner

KINDS = ("embedded", "qwen2-audio", "openai", "cascade")


@dataclass
class ReasonerConfig:
    kind: str = "embedded"
    """embedded | qwen2-audio | openai | cascade (a text LM reading tool records: Gemma 3 270M)."""
    embedded: EmbeddedReasonerConfig = field(default_factory=EmbeddedReasonerConfig)
    """Settings of the embedded simulator."""
    qwen2_audio: Qwen2AudioConfig = field(default_factory=Qwen2AudioConfig)
    """Settings of Qwen2-Audio in process."""
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    """Settings of an OpenAI-compatible endpoint."""
    cascade: CascadeReasonerConfig = field(default_factory=CascadeReasonerConfig)
    """Settings of the cascade text LM."""
    max_failure_rate: float = 0.05
    """Training stops, naming the reasoner and its last failure, once more than this share of its calls
    failed (a server that is down would otherwise turn rewards into noise). Evaluation counts failed
    calls as wrong answers and reports them instead."""
    min_calls: int = 20
    """Calls made before the failure rate is judged."""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"reasoner.kind must be one of {list(KINDS)}, got {self.kind!r}")
        if not 0 <= self.max_failure_rate <= 1 or self.min_calls < 1:
            raise ValueError("reasoner.max_failure_rate must be in [0, 1] and reasoner.min_calls >= 1")


def build_reasoner(config, cache_dir=None, audio_max_seconds: float = 30.0) -> CachedReasoner:
    """A cached reasoner from a :class:`ReasonerConfig`."""
    if config.kind == "embedded":
        inner = EmbeddedReasoner(config.embedded, audio_max_seconds)
    elif config.kind == "qwen2-audio":
        inner = Qwen2AudioReasoner(config.qwen2_audio)
    elif config.kind == "openai":
        inner = OpenAIReasoner(config.openai, config.cascade)  # the cascade's layout, for audio: drop
    elif config.kind == "cascade":
        inner = CascadeReasoner(config.cascade)
    else:
        raise ValueError(f"reasoner.kind must be one of {KINDS}, got {config.kind!r}")
    return CachedReasoner(inner, cache_dir, config.max_failure_rate, config.min_calls)


__all__ = [
    "KINDS",
    "CachedReasoner",
    "CascadeReasonerConfig",
    "OpenAIConfig",
    "Qwen2AudioConfig",
    "Reasoner",
    "ReasonerConfig",
    "answer_key",
    "build_reasoner",
]

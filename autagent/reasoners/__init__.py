"""Frozen reasoners behind one interface: ``answer(sample, records | None) -> reply``.

``embedded`` (offline, shipped weights), ``qwen2-audio`` (transformers, in process) and ``openai``
(any OpenAI-compatible audio chat endpoint).  :func:`build_reasoner` wraps each in the answer cache.
"""
from __future__ import annotations

from .base import CachedReasoner, Reasoner, answer_key

KINDS = ("embedded", "qwen2-audio", "openai")


def build_reasoner(config, cache_dir=None, audio_max_seconds: float = 30.0) -> CachedReasoner:
    """A cached reasoner from a :class:`autagent.config.ReasonerConfig`."""
    if config.kind == "embedded":
        from .embedded import EmbeddedReasoner

        inner = EmbeddedReasoner(config.embedded, audio_max_seconds)
    elif config.kind == "qwen2-audio":
        from .qwen2_audio import Qwen2AudioReasoner

        inner = Qwen2AudioReasoner(config.qwen2_audio)
    elif config.kind == "openai":
        from .openai_compat import OpenAIReasoner

        inner = OpenAIReasoner(config.openai)
    else:
        raise ValueError(f"reasoner.kind must be one of {KINDS}, got {config.kind!r}")
    return CachedReasoner(inner, cache_dir)


__all__ = ["KINDS", "CachedReasoner", "Reasoner", "answer_key", "build_reasoner"]

"""The embedded reasoner says it is a simulator where it answers a clip that is not from its benchmark.

Why: ``embedded`` is an offline stand-in for an audio LM, calibrated on the embedded benchmark
(:mod:`autagent.data.generator`); on a user's own clip it still picks a choice, and that choice was taken
for a model's answer (a bear recording answered "dog", a C major song "G major").  So the first clip of a
process that is not one of a generated benchmark's gets one warning naming a real model to ask instead.

A clip is the benchmark's when its bytes are one of the clips its benchmark folder records: a generated
benchmark writes ``<root>/audio/<split>/<id>.wav`` and ``<root>/digest.json`` (the SHA-256 of every file),
so the folder two levels above the clip is asked, wherever the command runs and whatever the folder is
named (the tests' tiny benchmark under ``.cache/tests`` is one too).  A benchmark clip copied elsewhere is
warned about: the warning says "not from", never more.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)
_warned: list[str] = []
"""The clip warned about in this process (one warning per process)."""


@functools.lru_cache(maxsize=64)
def _recorded(root: str, mtime_ns: int) -> frozenset[str]:
    """The SHA-256s ``<root>/digest.json`` records for the clips under ``audio/`` (read once per version)."""
    try:
        files = json.loads((Path(root) / "digest.json").read_text()).get("files") or {}
    except (OSError, ValueError, AttributeError):
        return frozenset()
    return frozenset(digest for name, digest in files.items() if str(name).startswith("audio/"))


def from_benchmark(path: str | Path) -> bool:
    """Whether ``path``'s bytes are one of the clips its enclosing benchmark folder records."""
    from tools.audio import AudioError, content_hash

    clip = Path(path).resolve()
    if len(clip.parents) < 3:
        return False
    digest_file = clip.parents[2] / "digest.json"
    try:
        recorded = _recorded(str(clip.parents[2]), digest_file.stat().st_mtime_ns)
        return bool(recorded) and content_hash(clip) in recorded
    except (OSError, AudioError):
        return False


def notice(path: str | Path) -> bool:
    """Warn once per process (on stderr, through logging) when ``path`` is not a benchmark clip; whether
    this call warned."""
    if _warned or not Path(path).is_file() or from_benchmark(path):  # a missing clip is the reasoner's error
        return False
    _warned.append(str(path))
    log.warning(
        "warning: %s is not a clip of the embedded benchmark: the embedded reasoner is a simulator tuned to that "
        "benchmark, so its answer here is a guess, not a model's; a real model: --reasoner cascade (Gemma 3 "
        "270M, offline, installed by make setup) or --reasoner openai (a served model)",
        Path(path).name,
    )
    return True


def cascade_at_hand(cascade) -> str | None:
    """Whether the cascade (a real text model, offline) can answer here, given its config
    (:class:`autagent.reasoners.cascade.CascadeReasonerConfig`): ``"converted"`` (``make setup`` converted
    it into the per-user cache), ``"installed"`` (its model package is, converted on first use: about a
    minute, once) or None (neither)."""
    import importlib.util

    from .cascade.weights import MODULE, read_source

    if cascade.model_dir:
        return "converted" if read_source(Path(cascade.model_dir)) is not None else None
    if read_source(Path(cascade.cache_dir) / "converted") is not None:
        return "converted"
    found = all(importlib.util.find_spec(name) is not None for name in (MODULE, "gguf"))
    return "installed" if found else None

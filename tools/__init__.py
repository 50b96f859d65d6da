"""The six acoustic tools, their runner, cache and Ray pool.

Tools in the paper's order (T1..T6 = index 0..5)::

    0 asr  1 emotion  2 chords  3 tempo  4 pitch  5 sound_events

``run_tool`` computes one record in-process; :class:`tools.pool.ToolPool` runs subsets in parallel
on Ray actors behind the on-disk :class:`tools.cache.ToolCache`.
"""
from __future__ import annotations

from . import asr, chords, emotion, pitch, sound_events, tempo
from .audio import Audio, AudioError, content_hash, load_audio
from .base import Backend, ToolSpec, make_record

TOOLS: tuple[ToolSpec, ...] = tuple(sorted((m.SPEC for m in (asr, emotion, chords, tempo, pitch, sound_events)),
                                           key=lambda spec: spec.index))
TOOL_IDS: tuple[str, ...] = tuple(spec.id for spec in TOOLS)
PROFILES = ("embedded", "cluster")


def get_tool(tool_id: str) -> ToolSpec:
    for spec in TOOLS:
        if spec.id == tool_id:
            return spec
    raise KeyError(f"unknown tool {tool_id!r}; known tools: {', '.join(TOOL_IDS)}")


def parse_tool_list(text: str | None) -> list[str]:
    """``"asr,chords"`` -> ``["asr", "chords"]`` in the paper's order; None or "all" -> every tool."""
    if text is None or text.strip() in ("", "all"):
        return list(TOOL_IDS)
    wanted = [t.strip() for t in text.split(",") if t.strip()]
    for tool_id in wanted:
        get_tool(tool_id)
    return [t for t in TOOL_IDS if t in wanted]


class ToolRunner:
    """Runs tools in this process, loading each backend's model once.

    ``settings`` maps tool id -> overrides of that backend's defaults (model ids, devices...).
    """

    def __init__(self, profile: str = "embedded", settings: dict | None = None, max_seconds: float | None = 30.0):
        if profile not in PROFILES:
            raise ValueError(f"unknown tool profile {profile!r}; choose one of {PROFILES}")
        self.profile = profile
        self.overrides = settings or {}
        self.max_seconds = max_seconds
        self._models: dict[str, object] = {}

    def identity(self, tool_id: str) -> tuple[str, str]:
        """(backend name, version) of ``tool_id`` under this runner's profile and settings."""
        backend = get_tool(tool_id).backend(self.profile)
        return backend.name, backend.version(self._settings(tool_id, backend))

    def _settings(self, tool_id: str, backend: Backend) -> dict:
        return {**backend.settings(self.overrides.get(tool_id)), "max_seconds": self.max_seconds}

    def run(self, tool_id: str, path: str) -> dict:
        """One JSON record; a bad clip or a failing model gives a record with ``"error"``, never an exception."""
        backend = get_tool(tool_id).backend(self.profile)
        settings = self._settings(tool_id, backend)
        name, version = backend.name, backend.version(settings)
        try:
            audio = load_audio(path, backend.sample_rate, self.max_seconds)
            if tool_id not in self._models:
                self._models[tool_id] = backend.load(settings)
            output = backend.infer(self._models[tool_id], audio, settings)
        except AudioError as err:
            return make_record(tool_id, name, version, error=str(err))
        except Exception as err:  # noqa: BLE001 - a tool failure is data for the caller, not a crash
            return make_record(tool_id, name, version, error=f"{path}: {type(err).__name__}: {err}")
        return make_record(tool_id, name, version, output=output)


__all__ = ["TOOLS", "TOOL_IDS", "PROFILES", "Audio", "AudioError", "ToolRunner", "ToolSpec", "content_hash",
           "get_tool", "load_audio", "make_record", "parse_tool_list"]

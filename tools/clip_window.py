"""A part of a clip a tool is asked to analyse: ``{start, end}`` in seconds, the arguments of every
function tool (:meth:`tools.base.ToolSpec.function`).

A model that calls tools itself (the agentic loop, an MCP client) may ask for one stretch of a long
clip.  The tool honours it by seeing only that stretch: :func:`cut` writes it to a file of its own
and the pool runs the tool there, caching the record under the clip's content and the window
(:meth:`Window.suffix`), so the same window is computed once and never confused with the whole clip.
Times inside a windowed record count from the window's start; the record says which window it is.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .audio import AudioError, load_audio

MIN_SECONDS = 0.05
"""A window shorter than this (after clipping to the clip's end) holds nothing a tool can measure."""


class WindowError(ValueError):
    """Arguments that are not a window; the message names the field and the value."""


def _seconds(arguments: dict, name: str) -> float | None:
    value = arguments.get(name)
    if value is None:
        return None
    try:  # an int too large for a float (10**400) is an OverflowError, not a number of seconds
        seconds = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise WindowError(f"{name} must be a number of seconds >= 0, got {shown}")
    return seconds


@dataclass(frozen=True)
class Window:
    """From ``start`` to ``end`` seconds of a clip (``end`` None: to the clip's end)."""

    start: float = 0.0
    end: float | None = None

    @classmethod
    def from_arguments(cls, arguments) -> Window | None:
        """The window a function call asks for; None when it names none (the whole clip).  Unknown
        arguments and values that are not seconds raise :class:`WindowError` naming them."""
        if arguments is None or arguments == {}:
            return None
        if not isinstance(arguments, dict):
            raise WindowError(f"the arguments must be a JSON object, got {type(arguments).__name__}")
        unknown = sorted(set(arguments) - {"start", "end"})
        if unknown:
            raise WindowError(f"unknown arguments {unknown}: a tool takes only start and end (seconds)")
        start, end = _seconds(arguments, "start"), _seconds(arguments, "end")
        if end is not None and end <= (start or 0.0):
            raise WindowError(f"end ({end:g} s) must be after start ({start or 0.0:g} s)")
        if not start and end is None:
            return None
        return cls(start or 0.0, end)

    @property
    def suffix(self) -> str:
        """What the window adds to a clip's identity in the record cache."""
        return f"@{self.start:g}-{'end' if self.end is None else f'{self.end:g}'}"

    def as_dict(self) -> dict:
        return {"start": self.start, "end": self.end}

    def label(self, path) -> str:
        return f"{path} [{self.start:g}-{'end' if self.end is None else f'{self.end:g}'} s]"


def cut(path: str | Path, window: Window, folder: str | Path, max_seconds: float | None) -> Path:
    """The window of ``path`` as a new WAV file in ``folder`` (float samples at the clip's own rate,
    at most ``max_seconds`` long); :class:`AudioError` naming the clip when the window starts after
    the clip ends.  The caller removes the file."""
    import soundfile as sf

    end = window.end if max_seconds is None else min(window.end or math.inf, window.start + max_seconds)
    audio = load_audio(path, None, None if math.isinf(end) else end)
    first = int(round(window.start * audio.sample_rate))
    samples = audio.samples[first:]
    if len(samples) < MIN_SECONDS * audio.sample_rate:
        raise AudioError(path, f"the window starts at {window.start:g} s, after the clip ends ({audio.duration:.2f} s)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(dir=folder, prefix=".window-", suffix=".wav", delete=False)
    handle.close()
    sf.write(handle.name, samples, audio.sample_rate, subtype="FLOAT")
    return Path(handle.name)

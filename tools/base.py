"""What every tool shares: the declared tool object, its backends, and the JSON record it returns.

A tool is a small declared object (:class:`ToolSpec`): a stable id, the description shown to
zero-shot selectors, the domains it serves, one :class:`Backend` per profile, a one-line
description of its record and, optionally, how the reasoner should see that record (``present``,
the paper's Appendix B shapes).  ``embedded`` backends run offline on weights that ship in registry
packages; ``cluster`` backends are the paper's models, loaded from ids in config.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .audio import Audio

TOOL_ID = re.compile(r"[a-z][a-z0-9_]{0,39}")
WINDOW_PARAMETERS = {
    "type": "object",
    "properties": {
        "start": {"type": "number", "minimum": 0, "description": "Seconds from the clip's beginning (default 0)."},
        "end": {"type": "number", "minimum": 0, "description": "Seconds from the clip's beginning (default: its end)."},
    },
    "additionalProperties": False,
}
"""Every function tool's JSON schema: an optional window of the clip (:class:`tools.clip_window.Window`)."""


@dataclass(frozen=True)
class Backend:
    """How one tool computes its output under one profile.

    ``load(settings)`` builds the heavy model once per process; ``infer(model, audio, settings)``
    maps a clip (already resampled to ``sample_rate``) to the tool's JSON-able output.  A backend
    that can batch also sets ``infer_batch(model, audios, settings) -> outputs`` (same order).
    """

    name: str
    library_version: Callable[[], str]
    sample_rate: int
    load: Callable[[dict], Any]
    infer: Callable[[Any, Audio, dict], Any]
    default_settings: dict = field(default_factory=dict)
    uses_gpu: bool = False
    infer_batch: Callable[[Any, Sequence[Audio], dict], list] | None = None
    revision: str = ""
    """Bumped when the backend's own code changes what it returns: the cache key and plugin manifests
    carry it, so records computed by older code are not reused."""

    def settings(self, overrides: dict | None) -> dict:
        return {**self.default_settings, **(overrides or {})}

    def version(self, settings: dict) -> str:
        """Library version, the code revision (if any) and a fingerprint of the settings: any change
        invalidates cached outputs."""
        blob = json.dumps(settings, sort_keys=True, default=str).encode()
        revision = f"+r{self.revision}" if self.revision else ""
        return f"{self.library_version()}{revision}+{hashlib.sha1(blob).hexdigest()[:8]}"


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the registry knows it.

    ``paper_index`` is the paper's T-number minus one (T1..T6 are 0..5; the project's own tools
    continue from 6), or None for a user's tool; it is only used for labels.
    """

    id: str
    description: str
    backends: dict[str, Backend]
    domains: tuple[str, ...] = ()
    output: str = ""  # one line: what ``output`` holds
    present: Callable[[Any], Any] | None = None  # output -> what the reasoner reads (None: as computed)
    paper_index: int | None = None

    def __post_init__(self):
        if not TOOL_ID.fullmatch(self.id):
            raise ValueError(f"tool id {self.id!r} must be lower-case letters, digits and '_' (at most 40)")
        if not self.description.strip():
            raise ValueError(f"tool {self.id!r} needs a description (zero-shot selectors read it)")
        if not self.backends:
            raise ValueError(f"tool {self.id!r} declares no backend")

    def backend(self, profile: str) -> Backend:
        """This tool's backend for ``profile``; a tool with one backend serves every profile."""
        if profile in self.backends:
            return self.backends[profile]
        if len(self.backends) == 1:
            return next(iter(self.backends.values()))
        raise KeyError(f"tool {self.id!r} has no backend for profile {profile!r}; known: {sorted(self.backends)}")

    @property
    def label(self) -> str:
        return f"T{self.paper_index + 1} {self.id}" if self.paper_index is not None else self.id

    @property
    def function(self) -> dict:
        """The tool as an OpenAI function tool (what a model that calls tools itself is offered): its id
        as the name, its description and what its record holds; the clip is implicit (the request's
        own), and the only arguments are an optional window, ``start`` and ``end`` in seconds."""
        returns = f" Returns {self.output}." if self.output else ""
        return {
            "type": "function",
            "function": {
                "name": self.id,
                "description": f"{self.description.strip()}{returns} Runs on the audio clip of the conversation; "
                "give start and end to analyse only that part (times in the result then count from start).",
                "parameters": copy.deepcopy(WINDOW_PARAMETERS),
            },
        }


def make_record(tool: str, backend: str, version: str, output: Any = None, error: str | None = None) -> dict:
    """The JSON record of one tool call: ``{"tool", "output", "backend", "version"}`` (+ ``"error"``)."""
    record = {"tool": tool, "output": output, "backend": backend, "version": version}
    if error is not None:
        record["error"] = error
    return record


def package_version(name: str) -> Callable[[], str]:
    """A lazy ``name-x.y.z`` string, read from installed metadata without importing the package, once
    per process (the code a process runs is the version it started with; the metadata is a file to
    parse, which cost a service's request about 0.3 ms per tool in the cache key)."""

    @functools.cache
    def read() -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"{name}-{version(name)}"
        except PackageNotFoundError:
            return f"{name}-missing"

    return read

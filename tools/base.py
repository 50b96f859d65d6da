"""What every tool shares: the backend contract and the JSON record it returns.

A tool has a stable id, the paper's index, a description (shown to zero-shot selectors and to
reasoners) and one :class:`Backend` per profile.  ``embedded`` backends run offline here on weights
that ship in registry packages; ``cluster`` backends are the paper's models, loaded from ids in config.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from .audio import Audio


@dataclass(frozen=True)
class Backend:
    """How one tool computes its output under one profile.

    ``load(settings)`` builds the heavy model once per process; ``infer(model, audio, settings)``
    maps a clip (already resampled to ``sample_rate``) to the tool's JSON-able output.
    """

    name: str
    library_version: Callable[[], str]
    sample_rate: int
    load: Callable[[dict], Any]
    infer: Callable[[Any, Audio, dict], Any]
    default_settings: dict = field(default_factory=dict)
    uses_gpu: bool = False

    def settings(self, overrides: dict | None) -> dict:
        return {**self.default_settings, **(overrides or {})}

    def version(self, settings: dict) -> str:
        """Library version plus a fingerprint of the settings: any change invalidates cached outputs."""
        blob = json.dumps(settings, sort_keys=True, default=str).encode()
        return f"{self.library_version()}+{hashlib.sha1(blob).hexdigest()[:8]}"


@dataclass(frozen=True)
class ToolSpec:
    """A tool: stable id, the paper's index (T1..T6 are indices 0..5), description, backends by profile."""

    id: str
    index: int
    description: str
    backends: dict[str, Backend]

    def backend(self, profile: str) -> Backend:
        try:
            return self.backends[profile]
        except KeyError:
            raise KeyError(f"tool {self.id!r} has no backend for profile {profile!r}; "
                           f"known: {sorted(self.backends)}") from None


def make_record(tool: str, backend: str, version: str, output: Any = None, error: str | None = None) -> dict:
    """The JSON record of one tool call: ``{"tool", "output", "backend", "version"}`` (+ ``"error"``)."""
    record = {"tool": tool, "output": output, "backend": backend, "version": version}
    if error is not None:
        record["error"] = error
    return record


def package_version(name: str) -> Callable[[], str]:
    """A lazy ``name-x.y.z`` string, read from installed metadata without importing the package."""

    def read() -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"{name}-{version(name)}"
        except PackageNotFoundError:
            return f"{name}-missing"

    return read

"""The acoustic tools: a registry of declared tools, their in-process runner, cache and Ray pool.

The paper's tools, T1..T6, then the project's T7::

    asr  emotion  chords  tempo  pitch  sound_events  speakers

A run's library is ``tools.enabled`` (default: the paper's six); see :mod:`tools.registry` for tools
from installed packages (entry points ``autagent.tools``) and from config (``tools.extra``).
``ToolRunner`` computes records in-process; :class:`tools.pool.ToolPool` runs them on Ray actors
behind the on-disk :class:`tools.cache.ToolCache`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from .audio import Audio, AudioError, content_hash, load_audio
from .base import Backend, ToolSpec, make_record
from .registry import PAPER_TOOLS, get_tool, parse_tool_list, registered, resolve

PROFILES = ("embedded", "cluster")


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
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def identity(self, tool_id: str) -> tuple[str, str]:
        """(backend name, version) of ``tool_id`` under this runner's profile and settings."""
        backend = get_tool(tool_id).backend(self.profile)
        return backend.name, backend.version(self._settings(tool_id, backend))

    def _settings(self, tool_id: str, backend: Backend) -> dict:
        return {**backend.settings(self.overrides.get(tool_id)), "max_seconds": self.max_seconds}

    def _model(self, tool_id: str, backend: Backend, settings: dict):
        if tool_id not in self._models:
            self._models[tool_id] = backend.load(settings)
        return self._models[tool_id]

    def run(self, tool_id: str, path: str) -> dict:
        """One JSON record; a bad clip or a failing model gives a record with ``"error"``, never an exception."""
        return self.run_batch(tool_id, [path])[0]

    def run_batch(self, tool_id: str, paths: Sequence[str], timeout_s: float | None = None) -> list[dict]:
        """Records for several clips; a backend with ``infer_batch`` sees every readable clip at once.
        Threads share a runner (a service's requests): one call per tool at a time, since a backend's
        model is not known to be thread-safe; different tools run side by side.

        With ``timeout_s`` the call (waiting for the tool's lock included) runs in a thread of its own
        and gives an error record per clip when it has not returned by then; a Python thread cannot be
        stopped, so the tool's model and lock are given up to the hung call and the next call loads the
        model afresh: a hung decoder costs one thread, never the caller, the lock or the service."""
        if timeout_s is None:
            with self.lock(tool_id):
                return self._run_batch(tool_id, paths)
        lock, box, done = self.lock(tool_id), {}, threading.Event()

        def call() -> None:
            try:
                with lock:
                    box["records"] = self._run_batch(tool_id, paths)
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                box["error"] = err
            done.set()

        threading.Thread(target=call, name=f"autagent-tool-{tool_id}", daemon=True).start()
        if done.wait(timeout_s):
            if "error" in box:
                raise box["error"]
            return box["records"]
        with self._locks_guard:
            if self._locks.get(tool_id) is lock:
                self._locks[tool_id] = threading.Lock()
                self._models.pop(tool_id, None)
        name, version = self.identity(tool_id)
        return [make_record(tool_id, name, version, error=f"{p}: timed out after {timeout_s:g}s") for p in paths]

    def lock(self, tool_id: str) -> threading.Lock:
        """The lock every call of ``tool_id``'s model holds (the tools on arriving audio take it too)."""
        with self._locks_guard:
            return self._locks.setdefault(tool_id, threading.Lock())

    def _run_batch(self, tool_id: str, paths: Sequence[str]) -> list[dict]:
        """:meth:`run_batch` under the tool's lock.

        Each clip that cannot be read gets its own error record; if the batched call itself fails,
        the clips are retried one at a time so a single bad clip never costs the others their record.
        """
        backend = get_tool(tool_id).backend(self.profile)
        settings = self._settings(tool_id, backend)
        name, version = backend.name, backend.version(settings)
        records: list[dict | None] = [None] * len(paths)
        audios: list[tuple[int, Audio]] = []
        for i, path in enumerate(paths):
            try:
                audios.append((i, load_audio(path, backend.sample_rate, self.max_seconds)))
            except AudioError as err:
                records[i] = make_record(tool_id, name, version, error=str(err))
            except Exception as err:  # noqa: BLE001 - a decoder failure is data, not a crash
                records[i] = make_record(tool_id, name, version, error=f"{path}: {type(err).__name__}: {err}")
        try:
            model = self._model(tool_id, backend, settings)
        except Exception as err:  # noqa: BLE001 - a model that will not load is an error record per clip
            for i, audio in audios:
                records[i] = make_record(tool_id, name, version, error=f"{audio.path}: {type(err).__name__}: {err}")
            return records
        if backend.infer_batch is not None and len(audios) > 1:
            try:
                outputs = backend.infer_batch(model, [a for _, a in audios], settings)
                for (i, _), output in zip(audios, outputs, strict=True):
                    records[i] = make_record(tool_id, name, version, output=output)
                return records
            except Exception:  # noqa: BLE001 - fall back to one clip at a time and find the culprit
                pass
        for i, audio in audios:
            try:
                records[i] = make_record(tool_id, name, version, output=backend.infer(model, audio, settings))
            except Exception as err:  # noqa: BLE001 - a tool failure is data for the caller, not a crash
                records[i] = make_record(tool_id, name, version, error=f"{audio.path}: {type(err).__name__}: {err}")
        return records


__all__ = [
    "PAPER_TOOLS",
    "PROFILES",
    "Audio",
    "AudioError",
    "Backend",
    "ToolRunner",
    "ToolSpec",
    "content_hash",
    "get_tool",
    "load_audio",
    "make_record",
    "parse_tool_list",
    "registered",
    "resolve",
]

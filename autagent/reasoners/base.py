"""The frozen-reasoner interface and the answer cache every reasoner sits behind.

``answer(sample, records)`` returns the reasoner's reply (a choice's text, or free text that the
scorer reads), or None when it produced nothing usable; ``records`` is None for the no-tool
baseline.  :class:`CachedReasoner` makes every (sample, reasoner, tool records) answer happen
once, across evaluation methods, training steps and runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Protocol

from ..data.sample import Sample


class Reasoner(Protocol):
    name: str

    def fingerprint(self) -> str: ...

    def answer(self, sample: Sample, records: list[dict] | None) -> str | None: ...


def answer_key(sample: Sample, records: list[dict] | None) -> str:
    """Identity of one reasoner call: the sample's content and the exact records shown."""
    shown = sorted(((r["tool"], json.dumps(r.get("output"), sort_keys=True)) for r in records or [] if "error" not in r))
    blob = json.dumps([sample.id, sample.audio, sample.question, list(sample.choices), shown])
    return hashlib.sha256(blob.encode()).hexdigest()


class CachedReasoner:
    """Wraps a reasoner with an append-only JSONL answer cache (one file per reasoner fingerprint).

    A killed process loses at most the line being written: a torn last line is ignored on load.
    """

    def __init__(self, reasoner: Reasoner, cache_dir: str | Path | None):
        self.inner = reasoner
        self.name = reasoner.name
        self.calls = 0
        self.hits = 0
        self._answers: dict[str, str | None] = {}
        self._lock = threading.Lock()
        self._file = None
        if cache_dir is not None:
            path = Path(cache_dir) / f"{reasoner.fingerprint()}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                for line in path.read_text().splitlines():
                    try:
                        row = json.loads(line)
                        self._answers[row["key"]] = row["answer"]
                    except (json.JSONDecodeError, KeyError):
                        continue
            self._file = open(path, "a", buffering=1)

    def fingerprint(self) -> str:
        return self.inner.fingerprint()

    def answer(self, sample: Sample, records: list[dict] | None) -> str | None:
        key = answer_key(sample, records)
        if key in self._answers:
            self.hits += 1
            return self._answers[key]
        reply = self.inner.answer(sample, records)
        self._store(key, reply)
        return reply

    def answer_many(self, requests: list[tuple[Sample, list[dict] | None]]) -> list[str | None]:
        """Answer a batch; misses go to the inner reasoner's ``answer_many`` when it has one (async APIs)."""
        keys = [answer_key(s, r) for s, r in requests]
        missing = {k: req for k, req in zip(keys, requests) if k not in self._answers}
        self.hits += len(keys) - len(missing)
        if missing:
            batch = list(missing.values())
            if hasattr(self.inner, "answer_many"):
                replies = self.inner.answer_many(batch)
            else:
                replies = [self.inner.answer(s, r) for s, r in batch]
            for key, reply in zip(missing, replies):
                self._store(key, reply)
        return [self._answers[k] for k in keys]

    def _store(self, key: str, reply: str | None) -> None:
        with self._lock:
            self.calls += 1
            self._answers[key] = reply
            if self._file is not None:
                self._file.write(json.dumps({"key": key, "answer": reply}) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None

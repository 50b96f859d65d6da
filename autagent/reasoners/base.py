"""The frozen-reasoner interface and the answer cache every reasoner sits behind.

A reasoner's ``answer_many(requests)`` takes ``(sample, records | None)`` pairs (None: the no-tool
prompt) and returns one :class:`Reply` per request: the text (a choice, a label, or free text the
scorer reads; None when it produced nothing usable) or an ``error`` when the call itself failed
(an unreadable clip, a server that never answered).  :class:`CachedReasoner` makes every answer
happen once, across evaluation methods, training steps and runs; failures are never cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import NamedTuple, Protocol

from tools.audio import AudioError, content_hash
from tools.memo import BoundedMemo

from ..data.sample import Sample

# Bump when a reasoner's code changes what it would answer: it is part of every fingerprint, so
# answers cached by older code are never served.
CODE_VERSION = "3"  # 3: records are shown in the notation of tools/notation.py (chord symbols, BPM)


class Reply(NamedTuple):
    text: str | None
    error: str | None = None
    note: str | None = None
    """What the caller should know about an answer that was given (records cut to fit a context)."""
    scores: tuple[float, ...] | None = None
    """Each choice's score, in choice order, where the reasoner computes them (cascade, embedded): how
    sure it was and what came second, which an answer table keeps beside the text."""


class Reasoner(Protocol):
    name: str

    def fingerprint(self) -> str: ...

    def answer_many(self, requests: list[tuple[Sample, list[dict] | None]]) -> list[Reply]: ...


def fingerprint_of(name: str, public_config: dict) -> str:
    """``name-<hash>`` of the reasoner's public settings and the code version (never secrets)."""
    blob = json.dumps({**public_config, "code_version": CODE_VERSION}, sort_keys=True, default=str)
    return f"{name}-{hashlib.sha1(blob.encode()).hexdigest()[:10]}"


def audio_identity(path: str) -> str:
    try:
        return content_hash(path)
    except AudioError:
        return "unreadable:" + path  # such a call fails and is never cached anyway


def answer_key(sample: Sample, records: list[dict] | None, audio: str | None = None) -> str:
    """Identity of one reasoner call: the clip's *content*, the question, the choices, the records shown."""
    audio = audio or audio_identity(sample.audio)
    shown = sorted((r["tool"], json.dumps(r.get("output"), sort_keys=True)) for r in records or [] if "error" not in r)
    blob = json.dumps([audio, sample.question, list(sample.choices), records is None, shown])
    return hashlib.sha256(blob.encode()).hexdigest()


_MISSING = object()


class ReasonerFailing(RuntimeError):
    """Too many of the reasoner's calls failed: rewards computed from them would be noise."""


MAX_CACHE_FILE_BYTES = 256 << 20
"""An answer cache file's size at most (about 1.5 million answers): past it the file is compacted to
the most recent answers held in memory that fill half of it, so that it neither grows without end nor
takes a long start to read."""
MAX_CACHE_LINE_BYTES = 1 << 20
"""A cache line longer than this is not an answer (a torn or foreign file): skipped unread."""


class CachedReasoner:
    """Wraps a reasoner with an append-only JSONL answer cache (one file per reasoner fingerprint).

    A killed process loses at most the line being written: a torn last line is ignored on load.  The
    file is read line by line (a line over :data:`MAX_CACHE_LINE_BYTES` skipped) and kept under
    ``max_file_bytes`` by compaction (:meth:`compact`: written aside, then put in place; a second
    process appending to the file meanwhile loses what it writes until it opens it again).
    Failed calls are returned with their error, counted in ``failures`` and never stored.
    :meth:`check_health` (called by training after each batch of calls) stops a run whose failure rate
    passes ``max_failure_rate`` once at least ``min_calls`` calls were made.
    """

    def __init__(
        self,
        reasoner: Reasoner,
        cache_dir: str | Path | None,
        max_failure_rate: float | None = None,
        min_calls: int = 20,
        max_memory_answers: int = 1_000_000,
        max_file_bytes: int = MAX_CACHE_FILE_BYTES,
    ):
        self.inner = reasoner
        self.name = reasoner.name
        self.calls = 0
        self.hits = 0
        self.failures = 0
        self.last_failure: str | None = None
        self.max_failure_rate, self.min_calls = max_failure_rate, min_calls
        # the answers and clip hashes held in memory: the most recent ``max_memory_answers`` (the file: its bound)
        self._answers = BoundedMemo(max_memory_answers)
        self._scores = BoundedMemo(max_memory_answers)
        self._lock = threading.Lock()
        self._file = None
        self._audio = BoundedMemo(65_536)  # (path, size, mtime) -> content hash: each file version hashed once
        self.max_file_bytes, self.path, self._size = max_file_bytes, None, 0
        if cache_dir is not None:
            self.path = Path(cache_dir) / f"{reasoner.fingerprint()}.jsonl"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                self._load(self.path)
            self._file = open(self.path, "a", buffering=1)
            self._size = self.path.stat().st_size
            if self._size > max_file_bytes:
                self.compact()

    def _load(self, path: Path) -> None:
        """The file's answers, line by line (never the whole file at once), the last of a key winning."""
        with open(path, "rb") as handle:
            while line := handle.readline(MAX_CACHE_LINE_BYTES):
                if not line.endswith(b"\n") and len(line) == MAX_CACHE_LINE_BYTES:
                    while line and not line.endswith(b"\n"):  # the rest of an over-long line, unread
                        line = handle.readline(MAX_CACHE_LINE_BYTES)
                    continue
                try:
                    row = json.loads(line)
                    self._answers[row["key"]] = row["answer"]
                    if row.get("scores") is not None:
                        self._scores[row["key"]] = tuple(row["scores"])
                except (ValueError, KeyError, TypeError):
                    continue

    def compact(self) -> None:
        """Rewrite the file as the most recent answers held in memory that fill half of
        ``max_file_bytes`` (the cache's bound: older answers are asked again if ever needed)."""
        if self.path is None:
            return
        scores = dict(self._scores.items())
        lines: list[str] = []
        size = 0
        for key, answer in reversed(self._answers.items()):
            row = {"key": key, "answer": answer}
            if scores.get(key) is not None:
                row["scores"] = list(scores[key])
            line = json.dumps(row) + "\n"
            if size + len(line) > self.max_file_bytes // 2:
                break
            lines.append(line)
            size += len(line)
        aside = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with open(aside, "w") as out:
            out.writelines(reversed(lines))
            out.flush()
            os.fsync(out.fileno())
        os.replace(aside, self.path)
        if self._file is not None:
            self._file.close()
        self._file, self._size = open(self.path, "a", buffering=1), size

    def fingerprint(self) -> str:
        return self.inner.fingerprint()

    def bound(self, max_memory_answers: int) -> None:
        """Keep at most this many answers in memory from now on (a service's bound; the file has its own)."""
        kept = BoundedMemo(max_memory_answers)
        kept.update(self._answers.items()[-max_memory_answers:])
        self._answers = kept
        scores = BoundedMemo(max_memory_answers)
        scores.update(self._scores.items()[-max_memory_answers:])
        self._scores = scores

    @property
    def where(self) -> str:
        """What answers: a server address, a model on a device, or the in-process simulator."""
        return getattr(self.inner, "where", self.name)

    def check_health(self) -> None:
        """Raise :class:`ReasonerFailing` naming the reasoner and its last failure when more than
        ``max_failure_rate`` of the calls so far failed (and at least ``min_calls`` were made)."""
        if self.max_failure_rate is None or self.calls < max(self.min_calls, 1):
            return
        rate = self.failures / self.calls
        if rate > self.max_failure_rate:
            raise ReasonerFailing(
                f"reasoner {self.where}: {self.failures} of {self.calls} calls failed ({100 * rate:.1f} %, more than "
                f"reasoner.max_failure_rate {100 * self.max_failure_rate:g} %); last failure: {self.last_failure}. "
                "Training on failed answers would train on noise: fix the reasoner and resume (--resume)"
            )

    def _key(self, sample: Sample, records: list[dict] | None) -> str:
        try:
            info = os.stat(sample.audio)
            version = (sample.audio, info.st_size, info.st_mtime_ns)
        except OSError:
            return answer_key(sample, records)
        audio = self._audio.get(version)
        if audio is None:  # hashing a clip once per version keeps training steps cheap
            audio = self._audio[version] = audio_identity(sample.audio)
        return answer_key(sample, records, audio)

    def is_cached(self, sample: Sample, records: list[dict] | None) -> bool:
        """Whether this call would be served from the cache (it costs nothing against a budget)."""
        return self._answers.get(self._key(sample, records), _MISSING) is not _MISSING

    def ask(self, requests: list[tuple[Sample, list[dict] | None]], max_new: int | None = None) -> list[Reply | None]:
        """Replies for a batch; only misses reach the inner reasoner (in one ``answer_many`` call).

        ``max_new`` caps the misses asked (a budget): the first ``max_new`` distinct misses are asked and
        every later one is answered ``None`` (not asked, not counted).  A reasoner that gives its replies
        as they arrive (``streams_replies``: a server's) has each stored then, not when the batch ends."""
        keys = [self._key(s, r) for s, r in requests]
        replies: dict[str, Reply] = {}
        for key in keys:
            answer = self._answers.get(key, _MISSING)
            if answer is not _MISSING:
                replies[key] = Reply(answer, scores=self._scores.get(key))
        self.hits += sum(k in replies for k in keys)
        missing = {k: req for k, req in zip(keys, requests) if k not in replies}
        if max_new is not None:
            missing = dict(list(missing.items())[: max(max_new, 0)])
        if missing:
            asked = list(missing)

            def arrived(index: int, reply: Reply) -> None:  # kept as it arrives: a stopped run keeps it
                key = asked[index]
                if key not in stored:
                    stored.add(key)
                    replies[key] = self._store(key, reply)

            stored: set[str] = set()
            if getattr(self.inner, "streams_replies", False):
                fresh = self.inner.answer_many(list(missing.values()), on_reply=arrived)
            else:
                fresh = self.inner.answer_many(list(missing.values()))
            for index, reply in enumerate(fresh):
                arrived(index, reply)
        return [replies.get(k) for k in keys]

    def answer_many(self, requests: list[tuple[Sample, list[dict] | None]]) -> list[str | None]:
        return [r.text for r in self.ask(requests)]

    def answer(self, sample: Sample, records: list[dict] | None) -> str | None:
        return self.ask([(sample, records)])[0].text

    def _store(self, key: str, reply: Reply) -> Reply:
        """Count and keep one fresh reply; returns it as a later cache hit will give it (scores rounded)."""
        with self._lock:
            self.calls += 1
            if reply.error is not None:
                self.failures += 1
                self.last_failure = reply.error
                return reply
            self._answers[key] = reply.text
            row = {"key": key, "answer": reply.text}
            if reply.scores is not None:
                reply = reply._replace(scores=tuple(round(float(v), 5) for v in reply.scores))
                self._scores[key] = row["scores"] = reply.scores
            if self._file is not None:
                line = json.dumps(row) + "\n"
                self._file.write(line)
                self._size += len(line)
                if self._size > self.max_file_bytes:
                    self.compact()
            return reply

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
            finally:
                self._file.close()
                self._file = None


def ask_with_records(
    reasoner: CachedReasoner, samples: list[Sample], records: dict[str, dict], subsets: list[tuple[str, ...] | None]
) -> list[Reply]:
    """Replies for each sample shown its subset's records (an empty or None subset: the no-tool
    prompt), in one batch; an unscorable row is answered here, as an error, without calling anything."""
    requests, where = [], []
    replies: list[Reply | None] = [None] * len(samples)
    for i, (sample, subset) in enumerate(zip(samples, subsets)):
        if sample.meta.get("unscorable"):
            replies[i] = Reply(None, f"unscorable row: {sample.meta['unscorable']}")
            continue
        requests.append((sample, [records[sample.id][t] for t in subset] if subset else None))
        where.append(i)
    for i, reply in zip(where, reasoner.ask(requests) if requests else []):
        replies[i] = reply
    return replies

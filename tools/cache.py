"""Content-addressed, on-disk cache of tool records shared by every process and run.

Key: (audio content hash, tool id, backend, version).  The version carries the backend's library
version and a fingerprint of its settings, so a changed model or setting never serves stale output.
Writes go to a temporary file in the same folder and are renamed into place (atomic on POSIX),
so concurrent workers and killed runs never leave a half-written record.

With ``max_bytes`` the cache is kept under that size, least recently used first: a hit touches its
file (its time is the last access, whatever the file system's atime setting), and once this process
has written a sixteenth of the bound since it last looked, it sums the folder and, when it is over,
deletes the oldest records down to 90 % of it.  Two processes may fill one cache: the deletions hold
a lock file (one sweep at a time, the other skips), a record deleted under a reader is a miss,
recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


class ToolCache:
    def __init__(self, root: str | Path, max_bytes: int | None = None):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.evicted = 0
        self._written = 0  # bytes this process wrote since its last sweep

    def path(self, audio_hash: str, tool: str, backend: str, version: str) -> Path:
        key = hashlib.sha256(f"{audio_hash}|{tool}|{backend}|{version}".encode()).hexdigest()
        return self.root / tool / key[:2] / f"{key}.json"

    def get(self, audio_hash: str, tool: str, backend: str, version: str) -> dict | None:
        path = self.path(audio_hash, tool, backend, version)
        try:
            with open(path) as handle:
                record = json.load(handle)
        except FileNotFoundError:
            self.misses += 1
            return None
        except (OSError, json.JSONDecodeError):  # unreadable entry: recompute rather than fail
            self.misses += 1
            return None
        self.hits += 1
        if self.max_bytes is not None:
            try:
                os.utime(path)  # the last access, for the sweep's order
            except OSError:
                pass
        return record

    def put(self, audio_hash: str, tool: str, backend: str, version: str, record: dict) -> None:
        """Store ``record`` atomically.  Error records are not cached: a fixed file should be retried."""
        if "error" in record:
            return
        path = self.path(audio_hash, tool, backend, version)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        except OSError as err:
            raise OSError(err.errno, f"cannot write the tool cache ({err.strerror})", str(path.parent)) from err
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(record, handle)
                size = handle.tell()
            os.replace(tmp, path)
        except BaseException as err:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(err, OSError):  # a full disk: say where, leave nothing half-written
                raise OSError(err.errno, f"cannot write the tool cache ({err.strerror})", str(path)) from err
            raise
        if self.max_bytes is not None:
            self._written += size
            if self._written > self.max_bytes // 16:
                self.sweep()

    def sweep(self) -> None:
        """Down to 90 % of ``max_bytes``, oldest access first, when the folder is over it."""
        import fcntl

        self._written = 0
        entries, total = [], 0
        for path in self.root.glob("*/*/*.json"):
            try:
                info = path.stat()
            except OSError:  # deleted by another process meanwhile
                continue
            entries.append((info.st_mtime, info.st_size, path))
            total += info.st_size
        if total <= self.max_bytes:
            return
        try:
            lock = open(self.root / ".sweep.lock", "a")
        except OSError:
            return
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # another process is sweeping
                return
            for _, size, path in sorted(entries, key=lambda e: e[0]):
                if total <= 0.9 * self.max_bytes:
                    break
                try:
                    path.unlink()
                    self.evicted += 1
                except OSError:
                    pass
                total -= size

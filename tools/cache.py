"""Content-addressed, on-disk cache of tool records shared by every process and run.

Key: (audio content hash, tool id, backend, version).  The version carries the backend's library
version and a fingerprint of its settings, so a changed model or setting never serves stale output.
Writes go to a temporary file in the same folder and are renamed into place (atomic on POSIX),
so concurrent workers and killed runs never leave a half-written record.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


class ToolCache:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0

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
            os.replace(tmp, path)
        except BaseException as err:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(err, OSError):  # a full disk: say where, leave nothing half-written
                raise OSError(err.errno, f"cannot write the tool cache ({err.strerror})", str(path)) from err
            raise

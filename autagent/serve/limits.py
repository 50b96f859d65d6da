"""What keeps ``autagent serve`` inside its bounds for weeks: a request body read up to a limit (its
bytes and its JSON values; counted against the service's places once whole), a clip's length read
from its header (never by decoding and resampling it all), and the clips folder kept under a size,
least recently used first.

Every refusal is a :class:`Refused` with the status and the message the client gets."""

from __future__ import annotations

import asyncio
import os
import threading
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np

from tools.decoders import Refusal, check_size, is_playlist
from tools.memo import BoundedMemo

from ..reasoners.json_limits import TooDeep, loads


class Refused(Exception):
    """A request the service will not serve: its HTTP status, message and OpenAI error type (and the
    field at fault, OpenAI's ``param``, when one is)."""

    def __init__(self, status: int, message: str, kind: str, headers: dict | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.headers, self.param = status, kind, headers or {}, param


INLINE_JSON_BYTES = 1 << 20
"""A request body under this is parsed on the event loop (about a millisecond at most): a thread hop
would cost as much as the parsing; a larger one (a long clip) is parsed in a worker thread."""


MAX_JSON_VALUES = 1 << 16
"""A request body holds at most this many JSON values, counted before it is parsed as its commas and
opening brackets (an upper bound: those in its strings count too): a chat request with a long history
and tools' schemas holds a few thousand; ``{"messages": [{}, {}, ...]}`` in the 34 MB a clip's body
may take held 8.5 million, and validating 6.4 MB of them added 1,850 MiB (issue 62)."""


def body_too_big(max_bytes: int) -> str:
    """A body over its limit, naming the flag it follows (a clip's base64 under --max-audio-mb, plus 1 MiB)."""
    clip_mb = (max_bytes - (1 << 20)) * 3 / 4 / 2**20
    return f"the request body is over the {max_bytes}-byte limit (it follows --max-audio-mb {clip_mb:.3g}: raise that)"


def body_limit(max_audio_bytes: int) -> int:
    """The largest request body: the clip in base64 (4 bytes per 3) and 1 MiB for the rest."""
    return 4 * -(-max_audio_bytes // 3) + (1 << 20)


class Arriving:
    """The bytes of request bodies still arriving, all requests together, under ``max_bytes``: a body
    counts against the service's places only once whole (:meth:`.service.Service.admit`), so these
    bound what bodies not yet whole may hold meanwhile (as many as the places' bodies: before, each
    such body held a place).  The event loop's alone: no lock."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.size = max_bytes, 0

    def take(self, size: int) -> bool:
        if self.size + size > self.max_bytes:
            return False
        self.size += size
        return True

    def give(self, size: int) -> None:
        self.size -= size


def separators(raw: bytes) -> int:
    """The commas and opening brackets in ``raw`` (numpy's vectorised compare: a sixth of the time of
    three ``bytes.count``, 1.35 ms for a 430 KB clip's body here)."""
    data = np.frombuffer(raw, np.uint8)
    return sum(int(np.count_nonzero(data == ord(c))) for c in ",[{")


async def read_json(request, max_bytes: int, arriving: Arriving | None = None) -> dict:
    """The request's JSON object, read chunk by chunk and refused (413) as soon as it passes
    ``max_bytes``; a declared ``Content-Length`` over the limit is refused before anything is read;
    a 429 when the bodies arriving at once would pass ``arriving``'s bound; a 413 for more than
    :data:`MAX_JSON_VALUES` values, before they are parsed."""
    too_big = Refused(413, body_too_big(max_bytes), "invalid_request_error")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_big
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise too_big
            if arriving is not None and not arriving.take(len(chunk)):
                size -= len(chunk)
                raise Refused(
                    429, "too many request bodies arriving at once: try again shortly", "rate_limit_error",
                    {"Retry-After": "1"},
                )  # fmt: skip
            chunks.append(chunk)
    finally:
        if arriving is not None:
            arriving.give(size)
    raw = b"".join(chunks)
    if len(raw) > MAX_JSON_VALUES and separators(raw) > MAX_JSON_VALUES:
        raise Refused(
            413,
            f"the request body has more than {MAX_JSON_VALUES} JSON separators (commas and opening brackets)",
            "invalid_request_error",
        )
    try:  # a body of a long clip is parsed off the event loop (one of a few MiB: under a millisecond here)
        body = loads(raw) if len(raw) < INLINE_JSON_BYTES else await asyncio.to_thread(loads, raw)
    except TooDeep as err:
        raise Refused(400, f"the body is {err}", "invalid_request_error") from None
    except ValueError:
        raise Refused(400, "the body is not JSON", "invalid_request_error") from None
    if not isinstance(body, dict):
        raise Refused(400, "the body must be a JSON object", "invalid_request_error")
    return body


def clip_seconds(path: str | Path, max_seconds: float, heard_s: float | None = None) -> float:
    """The clip's length in seconds, from its header where the format has one (WAV, FLAC, OGG...),
    checked for samples a tool can use by reading it block by block at its own rate (never resampled,
    never held whole); formats without a usable header are decoded at most ``max_seconds`` + 1 s.  A
    playlist is refused unread, and a header whose first ``heard_s`` (what the tools decode) pass
    :data:`tools.decoders.MAX_DECODED_SAMPLES` is refused before anything is decoded.
    Raises :class:`tools.audio.AudioError` for a clip that cannot be used."""
    import soundfile as sf

    # looked up when called, not at import: a test patches it on its module
    from tools.audio import SILENCE_PEAK, AudioError, check_file, load_audio

    path = Path(path)
    check_file(path)

    with open(path, "rb") as handle:
        if is_playlist(handle.read(64)):  # never handed to a decoder
            raise AudioError(path, "a playlist or list of files, not audio: refused", "playlist")
    try:
        info = sf.info(str(path))
        frames, rate, channels = int(info.frames), int(info.samplerate), int(info.channels)
    except Exception:  # noqa: BLE001 - no header libsndfile reads: decode (capped) instead
        frames = rate = channels = 0
    if frames <= 0 or rate <= 0:
        audio = load_audio(path, None, max_seconds + 1.0)
        return audio.duration
    seconds = frames / rate
    if seconds > max_seconds:
        return seconds
    try:  # from the header, before decoding: rate x channels x seconds
        check_size(rate, channels, min(frames, int((heard_s or max_seconds) * rate)))
    except Refusal as refusal:
        raise AudioError(path, str(refusal), refusal.code) from None
    peak = 0.0
    try:
        for block in sf.blocks(str(path), blocksize=1 << 16, dtype="float32", always_2d=True):
            if not np.all(np.isfinite(block)):
                raise AudioError(path, "samples contain NaN or infinity", "not_finite")
            peak = max(peak, float(np.max(np.abs(block.mean(axis=1)))) if block.size else 0.0)
    except AudioError:
        raise
    except Exception:  # noqa: BLE001 - a header that lies about its data
        raise AudioError(path, "cannot decode audio (its data is not what its header says)", "undecodable") from None
    if peak < SILENCE_PEAK:
        raise AudioError(path, f"audio is silent (peak {peak:.1e} < {SILENCE_PEAK:.0e})", "silent")
    return seconds


class AudioStore:
    """The service's clips folder (files named by their content) under ``max_bytes``: once past it, the
    least recently used clips are deleted, never one that a request in flight holds.  A clip is written
    and held in one step (:meth:`hold`), so none is ever on disk untracked, and one refused is deleted
    on release (``drop``) unless another request holds it.  Clips already in the folder when the
    service starts count from the start.  One service per folder."""

    def __init__(self, folder: str | Path, max_bytes: int):
        self.folder, self.max_bytes = Path(folder), max_bytes
        self._files: OrderedDict[Path, int] = OrderedDict()
        self._held: Counter[Path] = Counter()
        self._lock = threading.Lock()
        self.size = 0
        self.deleted = 0
        found = []
        for path in self.folder.iterdir() if self.folder.is_dir() else ():
            try:
                info = path.stat()
            except OSError:  # gone meanwhile
                continue
            if path.is_file():
                found.append((info.st_mtime, path, info.st_size))
        for _, path, size in sorted(found):
            self._files[path] = size
            self.size += size
        self._trim()

    def hold(self, raw: bytes, fmt: str, max_bytes: int | None = None) -> Path:
        """Write ``raw`` as a clip named by its content and hold it (the caller releases it)."""
        # looked up when called, not at import: a test patches it on its module
        from ..reasoners.messages import store_audio

        path = store_audio(raw, fmt, self.folder, max_bytes or len(raw))
        self._take(path)
        return path

    def retake(self, path: str | Path) -> bool:
        """Hold a clip the folder keeps (False when it has deleted it, or it is gone)."""
        path = Path(path)
        with self._lock:
            if path not in self._files or not path.exists():
                return False
            self._files.move_to_end(path)
            self._held[path] += 1
        return True

    def _take(self, path: Path) -> None:
        with self._lock:
            try:
                size = path.stat().st_size
            except OSError:
                size = 0
            self.size += size - self._files.get(path, 0)
            self._files[path] = size
            self._files.move_to_end(path)
            self._held[path] += 1

    def release(self, path: str | Path, drop: bool = False) -> None:
        """Let go of a held clip; ``drop``: the clip was refused, delete it unless another request holds it."""
        path = Path(path)
        with self._lock:
            self._held[path] -= 1
            if self._held[path] <= 0:
                del self._held[path]
                if drop and path in self._files:
                    self.size -= self._files.pop(path)
                    path.unlink(missing_ok=True)
                    self.deleted += 1
        self._trim()

    def _trim(self) -> None:
        with self._lock:
            if self.size <= self.max_bytes:
                return
            for path in list(self._files):
                if self.size <= self.max_bytes:
                    break
                if path in self._held:
                    continue
                self.size -= self._files.pop(path)
                try:
                    os.unlink(path)
                    self.deleted += 1
                except OSError:
                    pass


class SentClips:
    """The clips requests sent inline, by the SHA-256 of their base64 text (and format): the stored
    file, its bytes and its checked length in seconds.  A conversation sends its clip again with every
    turn; such a clip is neither decoded, hashed, written nor checked again (hashing the text costs a
    fifth of decoding it), as long as the clips folder keeps the file (:meth:`AudioStore.retake`).
    At most ``max_items`` entries, the least recently used dropped."""

    def __init__(self, max_items: int = 4096):
        self.memo = BoundedMemo(max_items)

    @staticmethod
    def key(data: str, fmt: str) -> str | None:
        """The text's key (None for text that is not ASCII: not base64, decoding refuses it)."""
        import hashlib

        return f"{hashlib.sha256(data.encode('ascii')).hexdigest()}.{fmt}" if data.isascii() else None

    def get(self, key: str) -> tuple[str, int, float] | None:
        """(the stored clip's path, its bytes, its seconds) of a clip sent before, or None."""
        return self.memo.get(key)

    def put(self, key: str, path: str, size: int, seconds: float) -> None:
        self.memo[key] = (path, size, seconds)


class WholeBody:
    """An ASGI app (``autagent mcp`` over HTTP: the MCP SDK's) whose request bodies are read whole
    before it runs: within ``timeout_s`` of the first read (a 408) and ``max_bytes`` (a 413), the rule
    ``serve`` keeps in :meth:`.service.Service.read_body`.  Without it, 128 half-sent requests held
    every place of ``autagent mcp --transport http`` for 75 s and more (issue 62).  Requests without
    a body (GET's event stream, DELETE) pass as they are."""

    def __init__(self, app, max_bytes: int, timeout_s: float):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunks.append(message.get("body", b""))
                    size += len(chunks[-1])
                    if size > self.max_bytes:
                        return await _refuse(send, 413, body_too_big(self.max_bytes))
                    if not message.get("more_body"):
                        break
        except TimeoutError:
            return await _refuse(send, 408, f"the request body did not arrive within {self.timeout_s:g} s")
        whole = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay():
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()  # then only the client's going away

        await self.app(scope, replay, send)


async def _refuse(send, status: int, message: str) -> None:
    import json

    kind = "timeout_error" if status == 408 else "invalid_request_error"
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})

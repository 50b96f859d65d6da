"""Decoders that cannot follow a reference: a clip is decoded from its own bytes, never from a file it
names.

ffmpeg, when asked to guess a format, plays an ``#EXTM3U`` playlist, an HLS index or a concat script
sent as "wav", reading every file they list (a clip could make a service read, and return the
analysis of, any local ``.flac`` or ``.mp3``).  So: a clip's format is told by its first bytes
(:func:`sniff`); texts that name other files (playlists) are refused at once; libsndfile (which reads
one file, its own) decodes what it can; ffmpeg only the formats libsndfile lacks, told its demuxer
(``-f``), reading the bytes from a pipe with ``-protocol_whitelist pipe`` (no file, no URL can be
opened), never probing; the MP4 family, whose index may come after the audio (a pipe cannot seek back
to it), from a private temporary copy of the bytes with ``-protocol_whitelist file``.  A clip ffmpeg
cannot decode says ffmpeg's own reason, in one bounded line.  The decoded samples are capped from
the header (rate x channels x seconds) before anything is decoded, and the channels are averaged block
by block (a 96 KB FLAC of 8 channels at 384 kHz once took 430 MiB)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from contextlib import contextmanager, suppress

import numpy as np

MAX_CHANNELS = 64
MAX_RATE = 384_000
MAX_DECODED_SAMPLES = 24_000_000
"""Samples decoded at most (rate x channels x seconds; 96 MB of float32): 8 channels at 96 kHz for
30 s fit, 8 channels at 384 kHz do not.  A tool hears one channel at 16-44.1 kHz."""
BLOCK_FRAMES = 1 << 16
PLAYLISTS = (b"#extm3u", b"#ext-x-", b"#extinf", b"ffconcat", b"[playlist]", b"<asx", b"<smil", b"<?xml", b"file ")
"""How texts that name other media begin (M3U, HLS, ffmpeg's concat script, PLS, ASX, SMIL, XSPF)."""
FFMPEG_DEMUXERS = {"mp3": "mp3", "m4a": "mov", "webm": "matroska", "ogg": "ogg", "flac": "flac", "wav": "wav"}
"""The only formats ffmpeg is asked to decode, each with its demuxer named."""
SEEKABLE = {"m4a"}
"""Formats ffmpeg must seek in: the MP4 family puts its index (``moov``) after the audio by default
(``ffmpeg -i x.wav y.m4a``, a phone's recorder), which a pipe cannot reach back from; these are
decoded from a private temporary copy (every other container decodes from a pipe)."""
DEMUXER_OPTIONS = {"m4a": ("-enable_drefs", "0")}
"""The MP4 demuxer may follow a file's data references to other files: never (ffmpeg's default,
said anyway)."""
MAX_REASON_BYTES, MAX_REASON_CHARS = 16_384, 300
"""ffmpeg's error output read at most, and the one-line reason a clip's refusal quotes at most."""


class Refusal(ValueError):
    """A clip refused before decoding: ``code`` (a short reason code a client may be shown) and why."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code = code


def sniff(head: bytes) -> str | None:
    """The format the first bytes say (wav, flac, ogg, mp3, m4a, webm, aiff, au, caf), or None."""
    if head[:4] in (b"RIFF", b"RF64", b"BW64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"riff":
        return "w64"
    if head.startswith(b"fLaC"):
        return "flac"
    if head.startswith(b"OggS"):
        return "ogg"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "mp3"
    if head[4:8] == b"ftyp":
        return "m4a"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "webm"
    if head.startswith(b"FORM") and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if head.startswith(b".snd"):
        return "au"
    if head.startswith(b"caff"):
        return "caf"
    return None


def is_playlist(head: bytes) -> bool:
    """Whether the bytes begin like a text that names other media (a BOM and blank space skipped)."""
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip().lower()
    return text.startswith(PLAYLISTS)


def check_declared(head: bytes, declared: str) -> None:
    """:class:`Refusal` when the bytes are a playlist or say another format than ``declared``."""
    if is_playlist(head):
        raise Refusal("playlist", "a playlist or list of files, not audio")
    found = sniff(head)
    if found is None:
        raise Refusal("unknown_format", f"the bytes are not {declared} audio (no known header)")
    if found != declared:
        raise Refusal("format_mismatch", f"the format is declared {declared} but the bytes are {found}")


def check_size(rate: int, channels: int, frames: int) -> None:
    """:class:`Refusal` for a header whose decoding would pass the bounds (before decoding it)."""
    if not 0 < channels <= MAX_CHANNELS or not 0 < rate <= MAX_RATE:
        raise Refusal("unusable_header", f"{channels} channels at {rate} Hz is not usable audio")
    if channels * frames > MAX_DECODED_SAMPLES:
        raise Refusal(
            "too_many_samples",
            f"{channels} channels at {rate} Hz for {frames / rate:.1f} s is over {MAX_DECODED_SAMPLES} samples",
        )


def mixer(frames: int, mono: bool):
    """(add(block), result()) collecting ``[frames, channels]`` blocks: averaged per block into one
    channel when ``mono`` (``[1, n]``), else kept (``[channels, n]``)."""
    parts: list[np.ndarray] = []

    def add(block: np.ndarray) -> None:
        parts.append(block.mean(axis=1, dtype=np.float32) if mono else block)

    def result() -> np.ndarray:
        if not parts:
            return np.zeros((1, 0), np.float32)
        joined = np.concatenate(parts)[:frames] if frames >= 0 else np.concatenate(parts)
        return joined[None, :] if mono else joined.T

    return add, result


def read_sndfile(path: str, max_seconds: float | None, mono: bool) -> tuple[np.ndarray, int]:
    """libsndfile's decoding, capped from the header; raises whatever libsndfile raises."""
    import soundfile as sf

    with sf.SoundFile(path) as handle:
        rate, channels = int(handle.samplerate), int(handle.channels)
        wanted = int(round(max_seconds * rate)) if max_seconds and max_seconds > 0 and rate > 0 else -1
        known = int(handle.frames) if handle.frames and handle.frames > 0 else -1
        check_size(rate, channels, max(0, min(known, wanted) if min(known, wanted) >= 0 else max(known, wanted)))
        add, result = mixer(wanted, mono)
        got = 0
        while wanted < 0 or got < wanted:
            step = BLOCK_FRAMES if wanted < 0 else min(BLOCK_FRAMES, wanted - got)
            block = handle.read(step, dtype="float32", always_2d=True)
            if not len(block):
                break
            add(block)
            got += len(block)
            if got * channels > MAX_DECODED_SAMPLES:  # a header that said less than the data holds
                raise Refusal("too_many_samples", f"over {MAX_DECODED_SAMPLES} samples decoded")
        return result(), rate


def read_ffmpeg(path: str, fmt: str, max_seconds: float | None, mono: bool, timeout_s: float = 120.0):
    """ffmpeg's decoding of ``path``'s bytes as ``fmt`` (its demuxer named; from a pipe, or for the MP4
    family from a private copy, with no protocol but that one), to float32 WAV on a pipe, capped once
    its header is read; a clip it cannot decode raises ``RuntimeError`` saying ffmpeg's reason."""
    with _input(path, fmt) as (stdin, source, protocol):
        command = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-protocol_whitelist", protocol]
        command += ["-f", FFMPEG_DEMUXERS[fmt], *DEMUXER_OPTIONS.get(fmt, ()), "-i", source, "-map", "0:a:0", "-vn"]
        if max_seconds and max_seconds > 0:
            command += ["-t", f"{max_seconds:.3f}"]
        command += ["-c:a", "pcm_f32le", "-f", "wav", "pipe:1"]
        process = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        said = _Said(process.stderr, source)
        try:
            try:
                rate, channels = _wav_header(process.stdout)
            except RuntimeError as err:
                raise RuntimeError(said.reason(process, timeout_s) or str(err)) from None
            wanted = int(round(max_seconds * rate)) if max_seconds and max_seconds > 0 else -1
            check_size(rate, channels, max(wanted, 0))  # without a length: the running count below
            add, result = mixer(wanted, mono)
            width, got = 4 * channels, 0
            while True:
                chunk = process.stdout.read(width * BLOCK_FRAMES)
                usable = len(chunk) - len(chunk) % width
                if usable:
                    add(np.frombuffer(chunk[:usable], "<f4").reshape(-1, channels))
                    got += usable // width
                if len(chunk) < width * BLOCK_FRAMES or (wanted >= 0 and got >= wanted):
                    break
                if got * channels > MAX_DECODED_SAMPLES:
                    raise Refusal("too_many_samples", f"over {MAX_DECODED_SAMPLES} samples decoded")
            if not got:  # a header and no samples: what ffmpeg said is the reason
                raise RuntimeError(said.reason(process, timeout_s) or "it decoded no audio samples")
            return result(), rate
        finally:
            process.kill()
            process.wait(timeout=timeout_s)
            process.stdout.close()
            said.join()


@contextmanager
def _input(path: str, fmt: str):
    """(ffmpeg's stdin, its input, the one protocol it may open): the file's bytes on a pipe; for a
    format whose index may come last (:data:`SEEKABLE`) a copy of them in a private temporary file
    (mode 0600, its name ours), deleted after, so that ffmpeg seeks in bytes that were checked and
    opens nothing but that file."""
    if fmt not in SEEKABLE:
        with open(path, "rb") as source:
            yield source, "pipe:0", "pipe"
        return
    handle, copy = tempfile.mkstemp(prefix="autagent-clip-", suffix=f".{fmt}")
    try:
        with os.fdopen(handle, "wb") as out, open(path, "rb") as source:
            shutil.copyfileobj(source, out, 1 << 20)
        yield subprocess.DEVNULL, f"file:{copy}", "file"
    finally:
        with suppress(OSError):
            os.unlink(copy)


class _Said:
    """ffmpeg's error lines, read as they come (a full pipe would stall it), the first
    :data:`MAX_REASON_BYTES` kept; :meth:`reason` is them as one short line, naming no path."""

    def __init__(self, stream, source: str):
        self.source, self.kept = source, bytearray()
        self.thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self.thread.start()

    def _drain(self, stream) -> None:
        for line in iter(lambda: stream.read(4096), b""):
            if len(self.kept) < MAX_REASON_BYTES:
                self.kept += line[: MAX_REASON_BYTES - len(self.kept)]
        stream.close()

    def join(self) -> None:
        self.thread.join(timeout=5)

    def reason(self, process, timeout_s: float) -> str:
        """What ffmpeg said once it ended (one line, at most :data:`MAX_REASON_CHARS`), or ""."""
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout_s)
        self.join()
        return ffmpeg_reason(self.kept.decode("utf-8", "replace"), self.source)


def ffmpeg_reason(text: str, source: str = "") -> str:
    """ffmpeg's error output as one line: each distinct message once, without its ``[demuxer @ 0x...]``
    prefix, the input's name said "the clip" and any other path "<path>", at most
    :data:`MAX_REASON_CHARS` characters."""
    seen: list[str] = []
    for line in text.splitlines():
        line = re.sub(r"^\[[^\]]*@ 0x[0-9a-f]+\]\s*", "", line.strip())
        if source:
            line = line.replace(source, "the clip")
        line = re.sub(r"(?<![\w.])/[^\s:'\"()\[\],]+", "<path>", line.replace("pipe:0", "the clip"))
        if line and not line.startswith("Last message repeated") and line not in seen:
            seen.append(line)
    joined = "; ".join(seen)
    return joined if len(joined) <= MAX_REASON_CHARS else joined[: MAX_REASON_CHARS - 3] + "..."


def _wav_header(stream) -> tuple[int, int]:
    """(rate, channels) of the float WAV ffmpeg writes, read up to its data chunk."""
    head = stream.read(12)
    if len(head) < 12 or head[:4] != b"RIFF":
        raise RuntimeError("it could not decode the bytes")
    rate = channels = 0
    while True:
        chunk = stream.read(8)
        if len(chunk) < 8:
            raise RuntimeError("it could not decode the bytes")
        name, size = chunk[:4], int.from_bytes(chunk[4:], "little")
        if name == b"data":
            if not rate:
                raise RuntimeError("it wrote no format")
            return rate, channels
        body = stream.read(size + size % 2)
        if name == b"fmt ":
            channels, rate = int.from_bytes(body[2:4], "little"), int.from_bytes(body[4:8], "little")

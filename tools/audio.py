"""One audio loader for every tool: any common format, mono, per-tool resampling, a length cap.

Bad input never passes silently: a missing, empty, corrupt, silent or NaN-filled file raises
:class:`AudioError`, whose message names the file and the reason.  Callers that process batches
catch it and turn it into an ``"error"`` record so one bad clip never sinks the rest.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SILENCE_PEAK = 1e-5  # below -100 dBFS peak we call a clip silent: nothing for a tool to hear


class AudioError(ValueError):
    """A clip that cannot be used; ``str(err)`` reads ``<path>: <reason>``; ``code`` is a short reason
    code and ``reason`` the why, which is what a client of a service is told (never the path)."""

    def __init__(self, path: str | Path, reason: str, code: str = "unusable_audio"):
        self.path = str(path)
        self.reason = reason
        self.code = code
        super().__init__(f"{path}: {reason}")


@dataclass(frozen=True)
class Audio:
    """A mono float32 waveform in [-1, 1] with its sample rate and where it came from."""

    samples: np.ndarray
    sample_rate: int
    path: str = ""

    @property
    def duration(self) -> float:
        return len(self.samples) / float(self.sample_rate)


def _read_any(path: Path, max_seconds: float | None = None, mono: bool = False) -> tuple[np.ndarray, int]:
    """Decode by decoders that cannot follow a reference (:mod:`tools.decoders`): a playlist is
    refused, libsndfile first (wav, flac, ogg, mp3, aiff...), ffmpeg told the format the bytes say
    (m4a, webm...) from a pipe; only the first ``max_seconds`` are decoded (an hour-long file costs
    what 30 s cost), never more samples than :data:`tools.decoders.MAX_DECODED_SAMPLES`; ``mono``:
    the channels averaged block by block (``[1, samples]``)."""
    from .decoders import FFMPEG_DEMUXERS, Refusal, is_playlist, read_ffmpeg, read_sndfile, sniff

    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
    except OSError as err:
        raise AudioError(path, f"cannot read file ({err.strerror})", "unreadable") from None
    if is_playlist(head):
        raise AudioError(path, "a playlist or list of files, not audio: refused", "playlist")
    fmt = sniff(head)
    try:
        try:
            return read_sndfile(str(path), max_seconds, mono)
        except Refusal:
            raise
        except Exception as sf_error:  # noqa: BLE001 - try the second decoder before giving up
            first = _said(sf_error, path)
            if fmt not in FFMPEG_DEMUXERS:
                raise AudioError(path, f"cannot decode audio (libsndfile: {first})", "undecodable") from None
            try:
                return read_ffmpeg(str(path), fmt, max_seconds, mono)
            except Refusal:
                raise
            except Exception as ff_error:  # noqa: BLE001
                second = _said(ff_error, path)
                raise AudioError(
                    path, f"cannot decode audio (libsndfile: {first}; ffmpeg: {second})", "undecodable"
                ) from None
    except Refusal as refusal:
        raise AudioError(path, str(refusal), refusal.code) from None


def _said(err: Exception, path: Path) -> str:
    """A decoder's message without the clip's path (libsndfile's names it)."""
    text = getattr(err, "error_string", None) or str(err) or type(err).__name__
    return text.replace(str(path), "the clip")


def check_file(path: Path) -> int:
    """The size of ``path`` if it is a regular file (links followed); a clear error otherwise, before
    anything opens it (a FIFO or a device would block or never end)."""
    return file_info(path).st_size


def file_info(path: Path):
    """``path``'s ``os.stat`` if it is a regular file (links followed); a clear error otherwise."""
    import stat

    try:
        info = path.stat()
    except FileNotFoundError:
        raise AudioError(path, "file not found") from None
    except OSError as err:
        raise AudioError(path, f"cannot read file ({err.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise AudioError(path, "is a directory, not an audio file")
    if not stat.S_ISREG(info.st_mode):
        raise AudioError(path, "is not a regular file (a device, FIFO or socket)")
    return info


def decode(path: str | Path, max_seconds: float | None = None, mono: bool = False) -> tuple[np.ndarray, int]:
    """``[channels, samples]`` (``[1, samples]``, averaged, when ``mono``) and the sample rate of a
    regular, non-empty file that decodes to finite samples (silence included: a dataset check asks
    only this); :class:`AudioError` otherwise."""
    path = Path(path)
    if check_file(path) == 0:
        raise AudioError(path, "file is empty (0 bytes)", "empty")
    channels, sr = _read_any(path, max_seconds, mono)
    if channels.size == 0:
        raise AudioError(path, "no audio samples", "no_samples")
    if not np.all(np.isfinite(channels)):
        raise AudioError(path, "samples contain NaN or infinity", "not_finite")
    return channels, sr


def length_past(path: str | Path, seconds: float) -> float | None:
    """None when the clip lasts at most ``seconds`` (what the tools hear); else its length, from its
    header where it has one, or ``math.inf`` (longer, by how much unknown) for a format without one,
    which is decoded at most ``seconds`` + 1 s to tell: a long clip is said, never cut silently."""
    import math

    import soundfile as sf

    try:
        info = sf.info(str(path))
        if info.frames > 0 and info.samplerate > 0:
            length = info.frames / info.samplerate
            return length if length > seconds + 1e-3 else None
    except Exception:  # noqa: BLE001 - no header libsndfile reads: decode, capped
        pass
    return math.inf if load_audio(path, None, seconds + 1.0).duration > seconds + 1e-3 else None


def load_audio(path: str | Path, sample_rate: int | None = None, max_seconds: float | None = None) -> Audio:
    """Load ``path`` as mono float32, resampled to ``sample_rate`` (native if None), cut at ``max_seconds``."""
    path = Path(path)
    channels, sr = decode(path, max_seconds, mono=True)
    mono = channels[0]
    if max_seconds is not None and max_seconds > 0:
        mono = mono[: int(round(max_seconds * sr))]
    peak = float(np.max(np.abs(mono))) if mono.size else 0.0
    if peak < SILENCE_PEAK:
        raise AudioError(path, f"audio is silent (peak {peak:.1e} < {SILENCE_PEAK:.0e})", "silent")
    if sample_rate is not None and sample_rate != sr:
        import librosa

        mono = librosa.resample(mono, orig_sr=sr, target_sr=sample_rate, res_type="soxr_hq")
        sr = sample_rate
    return Audio(np.ascontiguousarray(mono, dtype=np.float32), int(sr), str(path))


def without_paths(message: str, clip: str | Path | None = None) -> str:
    """``message`` as a client may be shown it: the clip's path said "the clip", any other absolute
    path "<path>" (a service's folders and files are not its clients' business)."""
    import re

    if clip:
        message = message.replace(str(clip), "the clip")
    return re.sub(r"(?<![\w.])/[^\s:'\"()\[\],]+", "<path>", message)


HASHED_FILES = 4096
"""How many files' hashes :func:`content_hash` remembers (the least recently asked dropped)."""
SETTLED_NS = 1_000_000_000
"""A file's hash is remembered only once the file has not changed for this long: a file's time
stamp ticks in milliseconds, so one rewritten at once, to the same size, could keep it (git's
"racily clean" files)."""
_hashes = None


def content_hash(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of the file's bytes: the clip's identity in every cache, whatever its name.  Remembered
    per file as it is on disk (its device, inode, size and modification time in nanoseconds): a clip
    asked about again (a service's request reads it for the tool cache's keys, the encoders' memos and
    the answer cache) is read and hashed once; a file rewritten or replaced is hashed again (one
    changed in the last :data:`SETTLED_NS` is hashed every time)."""
    global _hashes
    if _hashes is None:
        from .memo import BoundedMemo

        _hashes = BoundedMemo(HASHED_FILES)
    info = file_info(Path(path))
    key = (str(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    known = _hashes.get(key)
    if known is not None:
        return known
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(chunk), b""):
                digest.update(block)
    except OSError as err:
        raise AudioError(path, f"cannot read file ({err.strerror})") from err
    if time.time_ns() - info.st_mtime_ns > SETTLED_NS:
        _hashes[key] = digest.hexdigest()
    return digest.hexdigest()

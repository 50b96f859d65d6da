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
    """A clip that cannot be used; ``str(err)`` reads ``<path>: <reason>``."""

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
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


MAX_CHANNELS = 64


def _read_any(path: Path, max_seconds: float | None = None) -> tuple[np.ndarray, int]:
    """Decode with libsndfile (wav/flac/ogg/aiff), falling back to ffmpeg via audioread (mp3, m4a...);
    only the first ``max_seconds`` are decoded, so an hour-long file costs what 30 s cost."""
    import soundfile as sf

    try:
        with sf.SoundFile(str(path)) as handle:
            if not 0 < handle.channels <= MAX_CHANNELS or handle.samplerate <= 0:
                raise AudioError(path, f"{handle.channels} channels at {handle.samplerate} Hz is not usable audio")
            frames = -1 if not max_seconds or max_seconds <= 0 else int(round(max_seconds * handle.samplerate))
            data = handle.read(frames=frames, dtype="float32", always_2d=True)
            return data.T, int(handle.samplerate)
    except AudioError:
        raise
    except Exception as sf_error:  # noqa: BLE001 - try the second decoder before giving up
        try:
            import warnings

            import librosa

            with warnings.catch_warnings():  # librosa warns that it falls back to audioread: that is the point
                warnings.simplefilter("ignore")
                data, sr = librosa.load(str(path), sr=None, mono=False, duration=max_seconds or None)
            return np.atleast_2d(data).astype(np.float32), int(sr)
        except Exception as fallback_error:  # noqa: BLE001
            second = str(fallback_error) or type(fallback_error).__name__  # audioread's NoBackendError says nothing
            raise AudioError(path, f"cannot decode audio ({sf_error}; ffmpeg: {second})") from fallback_error


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


def decode(path: str | Path, max_seconds: float | None = None) -> tuple[np.ndarray, int]:
    """``[channels, samples]`` and the sample rate of a regular, non-empty file that decodes to finite
    samples (silence included: a dataset check asks only this); :class:`AudioError` otherwise."""
    path = Path(path)
    if check_file(path) == 0:
        raise AudioError(path, "file is empty (0 bytes)")
    channels, sr = _read_any(path, max_seconds)
    if channels.size == 0:
        raise AudioError(path, "no audio samples")
    if not np.all(np.isfinite(channels)):
        raise AudioError(path, "samples contain NaN or infinity")
    return channels, sr


def load_audio(path: str | Path, sample_rate: int | None = None, max_seconds: float | None = None) -> Audio:
    """Load ``path`` as mono float32, resampled to ``sample_rate`` (native if None), cut at ``max_seconds``."""
    path = Path(path)
    channels, sr = decode(path, max_seconds)
    mono = channels.mean(axis=0)
    if max_seconds is not None and max_seconds > 0:
        mono = mono[: int(round(max_seconds * sr))]
    peak = float(np.max(np.abs(mono))) if mono.size else 0.0
    if peak < SILENCE_PEAK:
        raise AudioError(path, f"audio is silent (peak {peak:.1e} < {SILENCE_PEAK:.0e})")
    if sample_rate is not None and sample_rate != sr:
        import librosa

        mono = librosa.resample(mono, orig_sr=sr, target_sr=sample_rate, res_type="soxr_hq")
        sr = sample_rate
    return Audio(np.ascontiguousarray(mono, dtype=np.float32), int(sr), str(path))


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

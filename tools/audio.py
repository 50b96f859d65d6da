"""One audio loader for every tool: any common format, mono, per-tool resampling, a length cap.

Bad input never passes silently: a missing, empty, corrupt, silent or NaN-filled file raises
:class:`AudioError`, whose message names the file and the reason.  Callers that process batches
catch it and turn it into an ``"error"`` record so one bad clip never sinks the rest.
"""

from __future__ import annotations

import hashlib
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
            raise AudioError(path, f"cannot decode audio ({sf_error}; {fallback_error})") from fallback_error


def check_file(path: Path) -> int:
    """The size of ``path`` if it is a regular file (links followed); a clear error otherwise, before
    anything opens it (a FIFO or a device would block or never end)."""
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
    return info.st_size


def load_audio(path: str | Path, sample_rate: int | None = None, max_seconds: float | None = None) -> Audio:
    """Load ``path`` as mono float32, resampled to ``sample_rate`` (native if None), cut at ``max_seconds``."""
    path = Path(path)
    if check_file(path) == 0:
        raise AudioError(path, "file is empty (0 bytes)")
    channels, sr = _read_any(path, max_seconds)
    if channels.size == 0:
        raise AudioError(path, "no audio samples")
    if not np.all(np.isfinite(channels)):
        raise AudioError(path, "samples contain NaN or infinity")
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


def content_hash(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of the file's bytes: the clip's identity in every cache, whatever its name."""
    digest = hashlib.sha256()
    check_file(Path(path))
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(chunk), b""):
                digest.update(block)
    except OSError as err:
        raise AudioError(path, f"cannot read file ({err.strerror})") from err
    return digest.hexdigest()

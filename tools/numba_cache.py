"""librosa's compiled kernels, filled into numba's on-disk cache by one process at a time.

librosa compiles its numba kernels on first use and caches them beside its sources (``cache=True``).
Two processes that compile the same *guvectorized* kernel at once can leave a cache whose two files
disagree, after which every call of that kernel segfaults, in every process, until the cache is
deleted (numba issue #10128). On a fresh ``.venv`` the Ray tool actors start together and each
compiles the same kernels (onset peak picking, local maxima, the beat tracker): ``make train`` died
that way on a fresh machine (2026-11-25), in an actor and then in the embedded reasoner.

:func:`warm_librosa` runs the librosa calls of our tools and of the embedded reasoner on a short
synthetic clip, in float32 and float64, under an exclusive file lock, so that the kernels are compiled
by one process and every other process only reads them. The pool calls it before it starts its actors
and each actor calls it again (cheap once the cache is full); ``make setup`` fills the cache once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile

import numpy as np

_warm = False


@contextlib.contextmanager
def _exclusive(path: str):
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _clip(sr: int, dtype) -> np.ndarray:
    """Two seconds of clicks at 120 BPM over a 220 Hz tone: onsets, beats and a pitch to find."""
    t = np.arange(2 * sr) / sr
    y = 0.3 * np.sin(2 * np.pi * 220 * t)
    y[(np.arange(len(t)) % (sr // 2)) < sr // 200] += 0.8
    return y.astype(dtype)


def warm_librosa() -> None:
    """Compile (or load) every librosa kernel the tools and reasoners use, once per process, holding
    a lock that every other process warming the same cache waits on."""
    global _warm
    if _warm:
        return
    import librosa

    lock = os.path.join(tempfile.gettempdir(), f"autagent-numba-{os.getuid()}.lock")
    with _exclusive(lock):
        for dtype in (np.float32, np.float64):
            for sr in (16000, 22050):
                y = _clip(sr, dtype)
                onset = librosa.onset.onset_strength(y=y, sr=sr)
                librosa.onset.onset_detect(y=y, sr=sr, hop_length=256, units="time")
                librosa.onset.onset_detect(onset_envelope=onset, sr=sr)
                librosa.beat.beat_track(y=y, sr=sr, hop_length=512)
                librosa.feature.tempo(onset_envelope=onset, sr=sr)
                librosa.yin(y, fmin=60, fmax=500, sr=sr, frame_length=1024, hop_length=256)
                librosa.piptrack(y=y, sr=sr, hop_length=512)
                librosa.feature.rms(y=y, frame_length=1024, hop_length=256)
                librosa.feature.mfcc(y=y, sr=sr, n_mfcc=20, n_fft=512, hop_length=256)
                librosa.util.localmax(np.abs(y[:4096]).reshape(64, 64), axis=0)
                librosa.util.localmin(np.abs(y[:4096]).reshape(64, 64), axis=-1)
    _warm = True

"""The runners of :mod:`tools.arriving`: each tool's work on the audio so far (YAMNet's patches, librosa's
frames for tempo and pitch, Whisper at the speaker's pauses), so that when the clip ends only its tail is
left; :class:`Runner` (any other tool) runs on the whole clip then.  The module's docstring there says how
each record comes out as the whole clip's would."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .audio import Audio


class Frames:
    """The frames librosa makes of a whole clip with ``center=True`` (``n_fft // 2`` zeros at each end),
    made as the clip grows: ``update(samples)`` computes the frames that lie wholly in the samples so
    far, ``update(samples, final=True)`` the rest.  ``compute(segment)`` maps a stretch of (padded)
    signal to its frames with ``center=False`` along the last axis."""

    def __init__(self, n_fft: int, hop: int, compute):
        self.n_fft, self.hop, self.compute = n_fft, hop, compute
        self.done = 0
        self.parts: list = []

    def update(self, samples: np.ndarray, final: bool = False) -> None:
        half = self.n_fft // 2
        if final:
            padded = np.concatenate([np.zeros(half, samples.dtype), samples, np.zeros(half, samples.dtype)])
            available = 1 + len(samples) // self.hop
        else:
            padded = np.concatenate([np.zeros(half, samples.dtype), samples])
            available = 1 + (len(padded) - self.n_fft) // self.hop if len(padded) >= self.n_fft else 0
        if available <= self.done:
            return
        segment = padded[self.done * self.hop : (available - 1) * self.hop + self.n_fft]
        self.parts.append(self.compute(segment))
        self.done = available

    def all(self):
        return self.parts[0] if len(self.parts) == 1 else np.concatenate(self.parts, axis=-1)


class Runner:
    """One tool on one arriving clip: ``feed`` the clip so far (at ``rate``), ``finish`` with all of it."""

    exact = True
    """Whether the output is the whole clip's record, byte for byte (else a documented equivalent)."""

    def __init__(self, backend, model, settings: dict, lock: threading.Lock):
        self.backend, self.model, self.settings, self.lock = backend, model, settings, lock
        self.rate = backend.sample_rate

    def feed(self, samples: np.ndarray) -> None:
        """Work on the clip so far; the default waits for the whole clip."""

    def finish(self, samples: np.ndarray, path: str) -> Any:
        with self.lock:
            return self.backend.infer(self.model, Audio(samples, self.rate, path), self.settings)

    def peek(self, samples: np.ndarray) -> Any:
        """A provisional output on the clip so far (nothing kept): what a reader of the records can
        start on before the clip ends."""
        with self.lock:
            return self.backend.infer(self.model, Audio(samples, self.rate, ""), self.settings)


class PatchScores:
    """YAMNet's patches (0.96 s every 0.48 s) of a growing 16 kHz signal, scored as they arrive: the
    probabilities ``YamNet.scores`` gives the whole signal."""

    def __init__(self, model, lock: threading.Lock):
        self.model, self.lock = model, lock
        self.scores: list[np.ndarray] = []

    @staticmethod
    def patches_in(n_samples: int) -> int:
        from .yamnet import PATCH_FRAMES, PATCH_HOP_FRAMES

        frames = 1 + (n_samples - 512) // 160 if n_samples >= 512 else 0
        return 1 + (frames - PATCH_FRAMES) // PATCH_HOP_FRAMES if frames >= PATCH_FRAMES else 0

    def feed(self, samples: np.ndarray) -> None:
        from .yamnet import PATCH_HOP_FRAMES, log_mel_patches

        done, available = len(self.scores), self.patches_in(len(samples))
        if available <= done:
            return
        patches = log_mel_patches(samples[done * PATCH_HOP_FRAMES * 160 :])[: available - done]
        with self.lock:
            self.scores += [self.model.scores_of_patches(patches[i : i + 1]) for i in range(len(patches))]

    def probabilities(self, samples: np.ndarray) -> np.ndarray:
        """``[patches, 521]`` for the whole signal."""
        if self.patches_in(len(samples)) == 0:  # shorter than one patch: YAMNet pads it
            with self.lock:
                return self.model.scores(samples)
        self.feed(samples)
        return np.concatenate(self.scores)


class SoundEventsRunner(Runner):
    """YAMNet's patches scored as they arrive; the clip's summary at the end."""

    def __init__(self, *args):
        super().__init__(*args)
        self.patches = PatchScores(self.model, self.lock)

    def feed(self, samples: np.ndarray) -> None:
        self.patches.feed(samples)

    def finish(self, samples: np.ndarray, path: str) -> Any:
        return self._summary(self.patches.probabilities(samples), len(samples) / self.rate)

    def peek(self, samples: np.ndarray) -> Any:
        self.feed(samples)
        return (
            self._summary(np.concatenate(self.patches.scores), len(samples) / self.rate)
            if self.patches.scores
            else None
        )

    def _summary(self, probabilities: np.ndarray, duration: float) -> dict:
        from .sound_events import summarise
        from .yamnet import PATCH_HOP_SECONDS, class_names

        s = self.settings
        return summarise(probabilities, class_names(), PATCH_HOP_SECONDS, 0.96, s["top_k"], s["min_score"], duration)


class TempoRunner(Runner):
    """``beat_track``'s mel power frames as they arrive; the onset envelope and beats at the end."""

    def __init__(self, *args):
        import librosa

        super().__init__(*args)
        hop = int(self.settings["hop_length"])
        mel = lambda y: librosa.feature.melspectrogram(y=y, sr=self.rate, n_fft=2048, hop_length=hop, center=False)  # noqa: E731
        self.frames = Frames(2048, hop, mel)

    def feed(self, samples: np.ndarray) -> None:
        self.frames.update(samples)

    def finish(self, samples: np.ndarray, path: str) -> Any:
        from .tempo import tempo_from_mel

        self.frames.update(samples, final=True)
        return tempo_from_mel(self.frames.all(), self.rate, self.settings)


class PitchRunner(Runner):
    """``piptrack``'s STFT and each frame's peak as they arrive; the voicing threshold and notes at the end."""

    def __init__(self, *args):
        super().__init__(*args)
        s = self.settings
        self.frames = Frames(int(s["n_fft"]), int(s["hop_length"]), self._peaks)

    def _peaks(self, segment: np.ndarray) -> np.ndarray:
        import librosa

        from .pitch import frame_peaks

        s = self.settings
        spectrum = np.abs(librosa.stft(segment, n_fft=int(s["n_fft"]), hop_length=int(s["hop_length"]), center=False))
        pitches, mags = librosa.piptrack(S=spectrum, sr=self.rate, fmin=float(s["fmin"]), fmax=float(s["fmax"]))
        return np.stack(frame_peaks(pitches, mags, s))

    def feed(self, samples: np.ndarray) -> None:
        self.frames.update(samples)

    def finish(self, samples: np.ndarray, path: str) -> Any:
        from .pitch import pitch_record, voiced_f0

        self.frames.update(samples, final=True)
        f0, strength = self.frames.all()
        return pitch_record(*voiced_f0(f0, strength, self.rate, self.settings), self.rate, self.settings)


class AsrRunner(Runner):
    """Whisper on the clip so far each time the speaker pauses; at the end, nothing more to do when no
    one spoke after the last pause, else the whole clip.

    Whisper reads a 30 s window whatever the clip's length, so a transcript of only the last stretch
    would cost what the whole clip costs, and a phrase transcribed on its own loses the words around it
    (tiny.en heard "the pilot at home is too short to delay" in a phrase it transcribes right in its
    sentence): the prefix up to a pause is transcribed instead, in its context and in clip time."""

    FRAME = 320  # 20 ms at 16 kHz

    def __init__(self, *args, pause_s: float = 0.4, pause_db: float = 35.0):
        super().__init__(*args)
        self.pause_frames = int(round(pause_s * self.rate / self.FRAME))
        self.pause_db = pause_db
        self.levels: list[float] = []  # dB of each 20 ms frame so far
        self.heard = 0  # samples transcribed in the last pass
        self.output = None  # that pass's transcript
        self.exact = True

    def _speech(self, first_frame: int) -> np.ndarray:
        """Which frames from ``first_frame`` on are speech (within ``pause_db`` of the loudest so far)."""
        floor = max(max(self.levels, default=-120.0) - self.pause_db, -70.0)
        return np.asarray(self.levels[first_frame:]) >= floor

    def _transcribe(self, samples: np.ndarray) -> None:
        with self.lock:
            self.output = self.backend.infer(self.model, Audio(samples, self.rate, ""), self.settings)
        self.heard = len(samples)

    def feed(self, samples: np.ndarray) -> None:
        for k in range(len(self.levels), len(samples) // self.FRAME):
            chunk = samples[k * self.FRAME : (k + 1) * self.FRAME].astype(np.float64)
            self.levels.append(10 * np.log10(float(np.mean(chunk**2)) + 1e-12))
        speech = self._speech(self.heard // self.FRAME)
        paused = len(speech) > self.pause_frames and not speech[-self.pause_frames :].any()
        if paused and speech.any():  # someone spoke since the last pass and has now paused
            self._transcribe(samples[: len(self.levels) * self.FRAME])

    def peek(self, samples: np.ndarray) -> Any:
        return self.output  # the last pass's: a transcript costs a whole pass

    def finish(self, samples: np.ndarray, path: str) -> Any:
        self.feed(samples)
        if self.output is not None and self.heard < len(samples) and not self._speech(self.heard // self.FRAME).any():
            self.exact = False  # only a pause came after the last pass: its transcript stands
            return self.output
        self._transcribe(samples)
        return self.output


RUNNERS = {
    "yamnet-int8-onnx": SoundEventsRunner,
    "librosa-beat-track": TempoRunner,
    "librosa-piptrack": PitchRunner,
    "faster-whisper-tiny.en": AsrRunner,
}
"""Backend name -> its runner on arriving audio (others: :class:`Runner`, the whole clip at the end)."""

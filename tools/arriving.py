"""Tools on a clip that is still arriving: each selected tool works on the audio so far, so that when
the clip ends only its tail is left to compute, and the records come out as the whole clip's would.

:class:`ClipStream` holds the clip (16-bit PCM at the client's rate, up to a cap) and resamples it as
it arrives to each tool's rate with a streaming soxr resampler, which gives exactly the samples that
:func:`tools.audio.load_audio` gives for the whole clip.  Each tool runs through a runner:

* ``sound_events`` (YAMNet): the 0.96 s patches every 0.48 s that lie in the audio so far are scored
  as they arrive; at the end the last ones, then the clip's summary.  The same record.
* ``tempo`` and ``pitch`` (librosa): their spectrogram frames (``beat_track``'s mel front end,
  ``piptrack``'s STFT and per-frame peak) are computed as the audio arrives, with the zero padding
  librosa puts at the clip's ends; at the end, the last frames and the clip-wide steps (dB scale,
  onset envelope and beat tracking; the voicing threshold and the notes).  The same record.
* ``asr`` (faster-whisper tiny.en): each time the speaker pauses (``pause_s`` of 20 ms frames quieter
  than the loudest so far by ``pause_db``) the clip so far is transcribed; when the clip ends with
  no speech after the last such pass, that transcript is the record, else the whole clip is
  transcribed then (the same record).  The first is a documented equivalent, not the same bytes (its
  version ends in ``+stream``, so it is cached apart): Whisper heard the same speech without the
  quiet tail, so the same words are expected and segment times within 0.2 s (a segment's end moved by
  0.1 s in the tests); ``tests/test_arriving.py`` checks both.
* every other tool (chords, emotion, speakers, a user's tools, the cluster backends) runs on the
  whole clip when it ends, from the samples already resampled: the same record.

Nothing here is unbounded: a clip past ``max_seconds`` is refused (:class:`ClipTooLong`), and a
runner keeps only frame summaries of the audio it has seen.
"""

from __future__ import annotations

import io
import threading
from typing import Any

import numpy as np

from .audio import SILENCE_PEAK, Audio
from .base import make_record
from .registry import get_tool


class ClipTooLong(ValueError):
    """More audio than the stream's cap."""


def wav_bytes(pcm: np.ndarray, sample_rate: int) -> bytes:
    """16-bit mono WAV bytes of ``pcm`` (int16): the committed clip, byte for byte what a client that
    posts the same samples whole writes (``soundfile``, ``PCM_16``)."""
    import soundfile as sf

    buffer = io.BytesIO()
    sf.write(buffer, np.asarray(pcm, dtype=np.int16), sample_rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue()


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


class ClipStream:
    """A clip as it arrives and the selected tools working on it (see the module's docstring).

    ``add`` may be called from any thread; ``select``, ``step`` and ``finish`` from one worker."""

    def __init__(self, runner, source_rate: int = 24000, max_seconds: float = 30.0):
        self.tool_runner, self.source_rate = runner, source_rate
        self.max_samples = int(round(max_seconds * source_rate))
        self._pending: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.pcm = np.zeros(0, np.int16)
        self._resamplers: dict[int, Any] = {}
        self._at_rate: dict[int, list[np.ndarray]] = {}
        self.runners: dict[str, Runner] = {}
        self.received = 0
        self.finished = False
        self.records: dict[str, dict] = {}

    # -- audio ------------------------------------------------------------------------------------
    def add(self, pcm: bytes | np.ndarray) -> None:
        """Append 16-bit mono samples; :class:`ClipTooLong` (and nothing kept) past the cap."""
        samples = np.frombuffer(pcm, dtype="<i2") if isinstance(pcm, bytes | bytearray) else np.asarray(pcm, np.int16)
        with self._lock:
            if self.received + len(samples) > self.max_samples:
                raise ClipTooLong(
                    f"the audio buffer would pass its cap of {self.max_samples / self.source_rate:g} s "
                    f"({self.max_samples} samples at {self.source_rate} Hz)"
                )
            self._pending.append(samples.copy())
            self.received += len(samples)

    @property
    def seconds(self) -> float:
        return self.received / self.source_rate

    def _take(self, final: bool) -> None:
        with self._lock:
            new = np.concatenate(self._pending) if self._pending else np.zeros(0, np.int16)
            self._pending = []
        self.pcm = np.concatenate([self.pcm, new])
        self.finished = final
        for rate in self._rates():
            self._resample(rate, new, final)

    def _rates(self) -> set[int]:
        return set(self._resamplers) | {r.rate for r in self.runners.values()}

    def _resample(self, rate: int, new: np.ndarray, final: bool) -> None:
        import soxr

        if rate == self.source_rate:
            return  # read from self.pcm
        as_float = new.astype(np.float32) / 32768.0  # what soundfile reads from a 16-bit WAV
        if rate not in self._resamplers:  # a rate first needed now: resample what came before too
            self._resamplers[rate] = soxr.ResampleStream(self.source_rate, rate, 1, dtype="float32", quality="HQ")
            earlier = self.pcm[: len(self.pcm) - len(new)].astype(np.float32) / 32768.0
            as_float = np.concatenate([earlier, as_float])
        last = final or self.finished
        self._at_rate.setdefault(rate, []).append(self._resamplers[rate].resample_chunk(as_float, last=last))

    def samples(self, rate: int) -> np.ndarray:
        """The clip so far at ``rate`` (float32 in [-1, 1])."""
        if rate == self.source_rate:
            return self.pcm.astype(np.float32) / 32768.0
        if rate not in self._at_rate:
            self._resample(rate, np.zeros(0, np.int16), False)
        parts = self._at_rate.get(rate) or [np.zeros(0, np.float32)]
        if len(parts) > 1:
            self._at_rate[rate] = parts = [np.concatenate(parts)]
        return parts[0]

    # -- tools ------------------------------------------------------------------------------------
    def select(self, tools) -> None:
        """Stream ``tools`` from now on (a tool added late starts on what is already here; one dropped
        stops)."""
        for tool_id in [t for t in self.runners if t not in tools]:
            del self.runners[tool_id]
        for tool_id in tools:
            if tool_id not in self.runners:
                self.runners[tool_id] = self._runner(tool_id)

    def _runner(self, tool_id: str) -> Runner:
        backend = get_tool(tool_id).backend(self.tool_runner.profile)
        settings = self.tool_runner._settings(tool_id, backend)
        model = self.tool_runner._model(tool_id, backend, settings)
        return RUNNERS.get(backend.name, Runner)(backend, model, settings, self.tool_runner.lock(tool_id))

    def step(self) -> None:
        """Bring every runner up to the audio received so far."""
        self._take(final=False)
        for runner in list(self.runners.values()):
            runner.feed(self.samples(runner.rate))

    def peek(self) -> list[dict]:
        """Provisional records of the selected tools on the audio so far (none kept, none cached)."""
        peeked = []
        for tool_id, runner in list(self.runners.items()):
            try:
                output = runner.peek(self.samples(runner.rate))
            except Exception:  # noqa: BLE001 - a provisional record is a hint; none is fine
                continue
            if output is not None:
                peeked.append(make_record(tool_id, *self.tool_runner.identity(tool_id), output))
        return peeked

    def end(self) -> None:
        """No more audio: the resamplers flushed, every rate's samples complete."""
        if not self.finished:
            self._take(final=True)

    def finish(self, path: str, stop=None) -> dict[str, dict]:
        """Every selected tool's record of the whole clip (``path``: the clip written out, named in the
        records' errors), the tools' tails two at a time (two cores); a tool that fails gives an error
        record.  ``stop()``, asked before each tool starts, stops the rest (their records say so)."""
        from concurrent.futures import ThreadPoolExecutor

        self.end()
        todo = [t for t in self.runners if t not in self.records]
        for runner in {self.runners[t].rate: self.runners[t] for t in todo}.values():
            self.samples(runner.rate)  # resampled here, before threads read them

        def record(tool_id: str) -> dict:
            if stop is not None and stop():
                return make_record(tool_id, *self.tool_runner.identity(tool_id), error=f"{path}: stopped")
            return self._record(tool_id, path)

        if len(todo) > 1:
            with ThreadPoolExecutor(2, thread_name_prefix="autagent-stream-tools") as pool:
                done = dict(zip(todo, pool.map(record, todo)))
        else:
            done = {t: record(t) for t in todo}
        self.records.update(done)
        return {t: self.records[t] for t in self.runners}

    def _record(self, tool_id: str, path: str) -> dict:
        runner = self.runners[tool_id]
        name, version = self.tool_runner.identity(tool_id)
        samples = self.samples(runner.rate)
        try:
            if float(np.max(np.abs(samples), initial=0.0)) < SILENCE_PEAK:
                raise ValueError("audio is silent")
            output = runner.finish(samples, path)
            return make_record(tool_id, name, version + ("" if runner.exact else "+stream"), output)
        except Exception as err:  # noqa: BLE001 - a tool failure is data, as in ToolRunner
            return make_record(tool_id, name, version, error=f"{path}: {type(err).__name__}: {err}")

"""Tools on a clip that is still arriving: each selected tool works on the audio so far, so that when
the clip ends only its tail is left to compute, and the records come out as the whole clip's would.

:class:`ClipStream` holds the clip (16-bit PCM at the client's rate, up to a cap) and resamples it as
it arrives to each tool's rate with a streaming soxr resampler, which gives exactly the samples that
:func:`tools.audio.load_audio` gives for the whole clip.  Each tool runs through a runner
(:mod:`tools.arriving_runners`):

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

from .arriving_runners import RUNNERS, Frames, PatchScores, Runner
from .audio import SILENCE_PEAK
from .base import make_record
from .registry import get_tool

__all__ = ["ClipStream", "ClipTooLong", "Frames", "PatchScores", "RUNNERS", "Runner", "wav_bytes"]


class ClipTooLong(ValueError):
    """More audio than the stream's cap."""


def wav_bytes(pcm: np.ndarray, sample_rate: int) -> bytes:
    """16-bit mono WAV bytes of ``pcm`` (int16): the committed clip, byte for byte what a client that
    posts the same samples whole writes (``soundfile``, ``PCM_16``)."""
    import soundfile as sf

    buffer = io.BytesIO()
    sf.write(buffer, np.asarray(pcm, dtype=np.int16), sample_rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue()


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

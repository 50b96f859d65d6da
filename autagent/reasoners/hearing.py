"""What the embedded reasoner hears without tools: the coarse gist an audio LM gets, with its errors.

The listener works on a degraded copy of the clip (band-limited to ``bandwidth_hz``, as a low-rate
audio encoder hears it) and reports, in words and in coarse bands:

* what kind of audio it is (speech, music or another sound) and its most salient AudioSet classes;
* for music, whether the beat feels slow, moderate or fast; for tonal sounds, a low, middle or
  high register; for speech, a deep or high voice and whether it sounds lively or subdued;
* roughly how long it lasts.

Numbers are perceived with a per-clip error (``noise``, log-normal, seeded by the clip's content)
and then rounded to their band, so hearing tells 70 from 150 BPM but not 100 from 110, and
sometimes gets a band wrong near its edge.  The bands are general listening knowledge (tempo
terms, speaking rates, pitch registers), not anything the benchmark generator uses.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

from tools.arriving import Frames, PatchScores
from tools.audio import content_hash, load_audio
from tools.memo import BoundedMemo
from tools.yamnet import YamNet, class_names

from .reading import REGISTER_BANDS, TEMPO_BANDS, Fact, band

DURATION_STEPS = (1, 2, 3, 5, 7, 10, 15, 20, 30)
HEARD_CLIPS = 16_384
"""Clips whose facts a process keeps (a few short sentences each)."""
GENERIC_CLASSES = {"Speech", "Music", "Silence", "Inside, small room", "Inside, large room or hall"}


class Listener:
    def __init__(
        self, bandwidth_hz: float = 4000.0, noise: float = 0.08, max_seconds: float = 30.0, tolerance: float = 0.3
    ):
        self.bandwidth_hz, self.noise, self.max_seconds, self.tolerance = bandwidth_hz, noise, max_seconds, tolerance
        self._memo = BoundedMemo(HEARD_CLIPS)

    def listen(self, path: str) -> list[Fact]:
        """The facts heard in ``path`` (raises :class:`tools.audio.AudioError` for a clip that cannot be read)."""
        key = content_hash(path)
        facts = self._memo.get(key)
        if facts is None:
            audio = load_audio(path, 16000, self.max_seconds)
            facts = self._memo[key] = self._hear(audio.samples, audio.duration, key)
        return facts

    def _hear(self, samples: np.ndarray, duration: float, key: str) -> list[Fact]:
        import librosa

        low = int(2 * self.bandwidth_hz)
        heard = librosa.resample(
            librosa.resample(samples, orig_sr=16000, target_sr=low, res_type="soxr_hq"),
            orig_sr=low,
            target_sr=16000,
            res_type="soxr_hq",
        )
        return self.facts(Heard(heard), duration, key)

    def stream(self) -> HearingStream:
        """This listener's ear on a clip that is still arriving (:class:`HearingStream`)."""
        return HearingStream(self)

    def facts(self, heard: Heard, duration: float, key: str) -> list[Fact]:
        """The facts of what the ear made of the band-limited copy (``key``: the clip's content, which
        seeds the perception errors)."""
        import librosa

        rng = np.random.default_rng(int(hashlib.sha256(key.encode()).hexdigest()[:8], 16))
        jitter = lambda: float(np.exp(rng.normal(0.0, self.noise)))  # noqa: E731
        scores = heard.scores
        names = class_names()
        mean, peak = dict(zip(names, scores.mean(0))), scores.max(0)
        speech, music = mean["Speech"], mean["Music"]
        salient = [names[i] for i in np.argsort(-peak)[:6] if names[i] not in GENERIC_CLASSES and peak[i] >= 0.1][:3]
        if speech >= max(music, 0.3):
            kind = "speech"
            facts = [Fact("speech")]
        elif music >= 0.3:
            kind = "music"
            facts = [Fact("music")]
        else:
            kind = "sound"
            facts = [Fact(f"a sound: {salient[0] if salient else 'noise'}")]
        if salient:
            facts.append(Fact("I can hear " + ", ".join(salient)))
        seconds = min(DURATION_STEPS, key=lambda s: abs(np.log(s / max(duration * jitter(), 0.1))))
        facts.append(Fact(f"it lasts about {seconds} seconds", ((float(seconds), "s"),), tolerance=self.tolerance))
        if kind == "music":
            bpm = float(np.atleast_1d(librosa.feature.tempo(onset_envelope=heard.onset, sr=16000))[0]) * jitter()
            words, centre = band(bpm, TEMPO_BANDS)
            facts.append(
                Fact(f"the beat feels {words}, roughly {centre:.0f} bpm", ((centre, "bpm"),), tolerance=self.tolerance)
            )
        f0 = self._pitch(heard)
        if f0 is not None and kind != "speech":
            words, centre = band(f0 * jitter(), REGISTER_BANDS)
            facts.append(
                Fact(f"the pitch sounds {words}, roughly {centre:.0f} Hz", ((centre, "hz"),), tolerance=self.tolerance)
            )
        if kind == "speech":
            facts.append(self._voice(heard, f0, jitter))
        return facts

    @staticmethod
    def _pitch(heard: Heard) -> float | None:
        """Median f0 of the loud frames, or None when the sound has no steady pitch."""
        f0 = heard.f0_wide
        rms = heard.rms[: len(f0)]
        loud = f0[: len(rms)][rms > 0.3 * rms.max()]
        if len(loud) < 3:
            return None
        steady = np.abs(np.diff(12 * np.log2(loud))) < 0.5
        return float(np.median(loud)) if steady.mean() > 0.5 else None

    @staticmethod
    def _voice(heard: Heard, f0: float | None, jitter) -> Fact:
        """A low or high voice; a lively or low-energy delivery, from the rate of syllable onsets (bands set on
        espeak-ng calibration voices the benchmark never uses: sad speech ~7/s, neutral ~11/s)."""
        import librosa

        rms = heard.rms
        speaking = max(float((rms > 0.1 * rms.max()).sum()) * 512 / 16000, 0.5)
        rate = len(librosa.onset.onset_detect(onset_envelope=heard.onset, sr=16000, units="time")) / speaking * jitter()
        pitch = heard.f0_voice
        voiced = pitch[: len(rms)][rms[: len(pitch)] > 0.3 * rms.max()]
        median = float(np.median(voiced)) if len(voiced) else 150.0
        height = "a low voice" if median < 140 else "a high voice" if median > 210 else "a medium voice"
        mood = "lively, energetic" if rate > 11.5 else "low in energy, slow" if rate < 8.5 else "even"
        return Fact(f"{height}, delivery {mood}")


class Heard:
    """What the ear makes of the band-limited copy (16 kHz), each part computed when first read: YAMNet's
    patch probabilities, the onset envelope, the RMS and two YIN tracks, all frame by frame."""

    def __init__(self, signal: np.ndarray):
        self.signal = signal

    @functools.cached_property
    def scores(self) -> np.ndarray:
        return YamNet.load().scores(self.signal)

    @functools.cached_property
    def onset(self) -> np.ndarray:
        import librosa

        return librosa.onset.onset_strength(y=self.signal, sr=16000)

    @functools.cached_property
    def rms(self) -> np.ndarray:
        import librosa

        return librosa.feature.rms(y=self.signal, frame_length=2048, hop_length=512)[0]

    @functools.cached_property
    def f0_wide(self) -> np.ndarray:
        import librosa

        return librosa.yin(self.signal, fmin=60, fmax=2000, sr=16000, frame_length=2048, hop_length=512)

    @functools.cached_property
    def f0_voice(self) -> np.ndarray:
        import librosa

        return librosa.yin(self.signal, fmin=60, fmax=400, sr=16000, frame_length=1024, hop_length=512)


class HearingStream:
    """The ear on a clip that is still arriving, as a realtime audio model hears it: ``feed`` the 16 kHz
    clip so far; the band-limited copy comes out of two streaming resamplers and every part of
    :class:`Heard` is computed frame by frame as it arrives (the same numbers as on the whole copy:
    :mod:`tools.arriving`); ``finish`` gives the facts :meth:`Listener.listen` gives the whole clip and
    remembers them under the clip's content, so answering it costs no hearing."""

    rate = 16000

    def __init__(self, listener: Listener):
        import threading

        import librosa
        import soxr

        self.listener, low = listener, int(2 * listener.bandwidth_hz)
        self.down = soxr.ResampleStream(16000, low, 1, dtype="float32", quality="HQ")
        self.up = soxr.ResampleStream(low, 16000, 1, dtype="float32", quality="HQ")
        self.fed, self.parts = 0, []
        sr = 16000
        self.mel = Frames(2048, 512, lambda y: librosa.feature.melspectrogram(y=y, sr=sr, hop_length=512, center=False))
        self.rms = Frames(
            2048, 512, lambda y: librosa.feature.rms(y=y, frame_length=2048, hop_length=512, center=False)[0]
        )
        wide = dict(fmin=60, fmax=2000, sr=sr, frame_length=2048, hop_length=512, center=False)
        self.f0_wide = Frames(2048, 512, lambda y: librosa.yin(y, **wide))
        self.f0_voice = Frames(1024, 512, lambda y: librosa.yin(y, **{**wide, "fmax": 400, "frame_length": 1024}))
        self.patches = PatchScores(YamNet.load(), threading.Lock())  # an ONNX session runs from any thread

    def feed(self, samples: np.ndarray, final: bool = False) -> None:
        new, self.fed = samples[self.fed :], len(samples)
        self.parts.append(self.up.resample_chunk(self.down.resample_chunk(new, last=final), last=final))
        signal = self.signal
        for frames in (self.mel, self.rms, self.f0_wide, self.f0_voice):
            frames.update(signal, final)
        if not final:
            self.patches.feed(signal)

    @property
    def signal(self) -> np.ndarray:
        if len(self.parts) > 1:
            self.parts = [np.concatenate(self.parts)]
        return self.parts[0] if self.parts else np.zeros(0, np.float32)

    def peek(self) -> list[Fact]:
        """Provisional facts of what has been heard so far (the frames at the clip's end not yet final):
        what a reader can start on; nothing is remembered."""
        import librosa

        signal = self.signal
        if not self.patches.scores or not self.mel.parts:
            return []
        heard = Heard(signal)
        heard.scores = np.concatenate(self.patches.scores)
        heard.onset = librosa.onset.onset_strength(S=librosa.power_to_db(self.mel.all()), sr=16000)
        heard.rms, heard.f0_wide, heard.f0_voice = self.rms.all(), self.f0_wide.all(), self.f0_voice.all()
        return self.listener.facts(heard, len(signal) / 16000, "provisional")

    def finish(self, samples: np.ndarray, path: str) -> None:
        """The whole clip has come (``path``: it, written out): its facts, remembered by the listener."""
        import librosa

        self.feed(samples, final=True)
        heard = Heard(self.signal)
        heard.scores = self.patches.probabilities(self.signal)
        heard.onset = librosa.onset.onset_strength(S=librosa.power_to_db(self.mel.all()), sr=16000)
        heard.rms, heard.f0_wide, heard.f0_voice = self.rms.all(), self.f0_wide.all(), self.f0_voice.all()
        key = content_hash(path)
        self.listener._memo[key] = self.listener.facts(heard, len(samples) / 16000, key)

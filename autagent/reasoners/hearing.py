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

import hashlib

import numpy as np

from tools.memo import BoundedMemo

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
        from tools.audio import content_hash, load_audio

        key = content_hash(path)
        facts = self._memo.get(key)
        if facts is None:
            audio = load_audio(path, 16000, self.max_seconds)
            facts = self._memo[key] = self._hear(audio.samples, audio.duration, key)
        return facts

    def _hear(self, samples: np.ndarray, duration: float, key: str) -> list[Fact]:
        import librosa

        from tools.yamnet import YamNet, class_names

        low = int(2 * self.bandwidth_hz)
        heard = librosa.resample(
            librosa.resample(samples, orig_sr=16000, target_sr=low, res_type="soxr_hq"),
            orig_sr=low,
            target_sr=16000,
            res_type="soxr_hq",
        )
        rng = np.random.default_rng(int(hashlib.sha256(key.encode()).hexdigest()[:8], 16))
        jitter = lambda: float(np.exp(rng.normal(0.0, self.noise)))  # noqa: E731
        scores = YamNet.load().scores(heard)
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
            onset = librosa.onset.onset_strength(y=heard, sr=16000)
            bpm = float(np.atleast_1d(librosa.feature.tempo(onset_envelope=onset, sr=16000))[0]) * jitter()
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
    def _pitch(samples: np.ndarray) -> float | None:
        """Median f0 of the loud frames, or None when the sound has no steady pitch."""
        import librosa

        f0 = librosa.yin(samples, fmin=60, fmax=2000, sr=16000, frame_length=2048, hop_length=512)
        rms = librosa.feature.rms(y=samples, frame_length=2048, hop_length=512)[0][: len(f0)]
        loud = f0[: len(rms)][rms > 0.3 * rms.max()]
        if len(loud) < 3:
            return None
        steady = np.abs(np.diff(12 * np.log2(loud))) < 0.5
        return float(np.median(loud)) if steady.mean() > 0.5 else None

    @staticmethod
    def _voice(samples: np.ndarray, f0: float | None, jitter) -> Fact:
        """A low or high voice; a lively or low-energy delivery, from the rate of syllable onsets (bands set on
        espeak-ng calibration voices the benchmark never uses: sad speech ~7/s, neutral ~11/s)."""
        import librosa

        rms = librosa.feature.rms(y=samples, hop_length=512)[0]
        speaking = max(float((rms > 0.1 * rms.max()).sum()) * 512 / 16000, 0.5)
        rate = len(librosa.onset.onset_detect(y=samples, sr=16000, units="time")) / speaking * jitter()
        pitch = librosa.yin(samples, fmin=60, fmax=400, sr=16000, frame_length=1024, hop_length=512)
        voiced = pitch[: len(rms)][rms[: len(pitch)] > 0.3 * rms.max()]
        median = float(np.median(voiced)) if len(voiced) else 150.0
        height = "a low voice" if median < 140 else "a high voice" if median > 210 else "a medium voice"
        mood = "lively, energetic" if rate > 11.5 else "low in energy, slow" if rate < 8.5 else "even"
        return Fact(f"{height}, delivery {mood}")

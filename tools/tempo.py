"""T4 tempo: librosa ``beat_track``, refined by a line fit through the tracked beats.

``beat_track`` quantises tempo to its onset-autocorrelation lag grid (at 22.05 kHz / hop 512 the
bins around 120 BPM are 117.5 and 123.0), so we report the slope of beat time against beat number,
which averages the per-beat frame error away.
"""

from __future__ import annotations

import numpy as np

from .audio import Audio
from .base import Backend, ToolSpec, package_version
from .notation import bpm

DESCRIPTION = "Estimates the tempo of music in beats per minute (BPM) and the beat times, using librosa beat tracking."


def estimate_tempo(audio: Audio, settings: dict) -> dict:
    import librosa

    hop = int(settings["hop_length"])
    tempo, beat_frames = librosa.beat.beat_track(y=audio.samples, sr=audio.sample_rate, hop_length=hop)
    return tempo_record(tempo, beat_frames, audio.sample_rate, settings)


def tempo_from_mel(mel_power, sample_rate: int, settings: dict) -> dict:
    """The record from the clip's mel power spectrogram (``beat_track``'s own front end, frame by frame:
    what :mod:`tools.arriving` computes as the clip arrives), exactly as :func:`estimate_tempo` gives it."""
    import librosa

    hop = int(settings["hop_length"])
    envelope = librosa.onset.onset_strength(
        S=librosa.power_to_db(mel_power), sr=sample_rate, hop_length=hop, aggregate=np.median
    )
    tempo, beat_frames = librosa.beat.beat_track(onset_envelope=envelope, sr=sample_rate, hop_length=hop)
    return tempo_record(tempo, beat_frames, sample_rate, settings)


def tempo_record(tempo, beat_frames, sample_rate: int, settings: dict) -> dict:
    import librosa

    hop = int(settings["hop_length"])
    beats = librosa.frames_to_time(beat_frames, sr=sample_rate, hop_length=hop)
    coarse = float(np.atleast_1d(tempo)[0])
    bpm = coarse
    if len(beats) >= 4:
        period = float(np.polyfit(np.arange(len(beats)), beats, 1)[0])
        if period > 0 and abs(60.0 / period - coarse) / max(coarse, 1e-6) < 0.1:
            bpm = 60.0 / period
    return {"bpm": round(bpm, 1), "beats": [round(float(t), 2) for t in beats[: settings["max_beats"]]]}


_BACKEND = Backend(
    name="librosa-beat-track",
    library_version=package_version("librosa"),
    sample_rate=22050,
    load=lambda settings: None,
    infer=lambda model, audio, settings: estimate_tempo(audio, settings),
    default_settings={"hop_length": 512, "max_beats": 32},
)


def present(output: dict) -> str:
    """Appendix B's bare string of the tempo, with its unit: ``"117.2 BPM"`` (the paper shows ``"117.19"``)."""
    return bpm(output["bpm"])


SPEC = ToolSpec(
    id="tempo",
    paper_index=3,
    description=DESCRIPTION,
    domains=("music",),
    present=present,
    output="{bpm, beats: [s]}",
    backends={"embedded": _BACKEND, "cluster": _BACKEND},
)

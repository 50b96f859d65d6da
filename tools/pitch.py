"""T5 pitch: librosa ``piptrack``, reduced to one f0 per frame and merged into note segments.

Output: ``{"f0": [{"time", "hz"}...], "notes": [{"start", "end", "note", "hz"}...]}``: the raw
timestamped f0 of the paper's appendix, plus the same track grouped into stable notes, which is
what a reader needs to answer "which note at 2 s".
"""

from __future__ import annotations

import numpy as np

from .audio import Audio
from .base import Backend, ToolSpec, package_version

DESCRIPTION = (
    "Tracks the fundamental frequency (pitch, f0 in Hz) of the main melody or tone over time and names the notes."
)


def frame_f0(audio: Audio, settings: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame f0 in Hz (0 where unvoiced) and frame times.

    The strongest piptrack peak is often a harmonic (a violin's 4th partial), so each frame takes the
    lowest-frequency peak within ``harmonic_ratio`` of the frame's strongest one.
    """
    import librosa

    pitches, mags = librosa.piptrack(
        y=audio.samples,
        sr=audio.sample_rate,
        n_fft=int(settings["n_fft"]),
        hop_length=int(settings["hop_length"]),
        fmin=float(settings["fmin"]),
        fmax=float(settings["fmax"]),
    )
    return voiced_f0(*frame_peaks(pitches, mags, settings), audio.sample_rate, settings)


def frame_peaks(pitches: np.ndarray, mags: np.ndarray, settings: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each frame's f0 candidate and its strength (frame by frame: :mod:`tools.arriving` computes them as
    the clip arrives)."""
    cols = np.arange(pitches.shape[1])
    frame_max = mags.max(axis=0, keepdims=True)
    best = np.argmax(mags >= settings["harmonic_ratio"] * np.maximum(frame_max, 1e-12), axis=0)
    return pitches[best, cols], mags[best, cols]


def voiced_f0(f0: np.ndarray, strength: np.ndarray, sample_rate: int, settings: dict):
    """Frames weaker than ``threshold`` of the clip's strongest are unvoiced (0); with the frame times."""
    import librosa

    f0 = f0.copy()
    f0[strength < settings["threshold"] * max(float(strength.max()), 1e-12)] = 0.0
    times = librosa.frames_to_time(np.arange(len(f0)), sr=sample_rate, hop_length=int(settings["hop_length"]))
    return f0, times


def note_segments(f0: np.ndarray, times: np.ndarray, min_duration: float) -> list[dict]:
    """Group consecutive voiced frames that share a rounded MIDI note into ``{start, end, note, hz}``."""
    import librosa

    midi = np.where(f0 > 0, np.round(librosa.hz_to_midi(np.maximum(f0, 1e-6))), -1)
    segments, start = [], 0
    for i in range(1, len(midi) + 1):
        if i == len(midi) or midi[i] != midi[start]:
            if midi[start] >= 0 and times[min(i, len(times) - 1)] - times[start] >= min_duration:
                hz = float(np.median(f0[start:i]))
                segments.append(
                    {
                        "start": round(float(times[start]), 2),
                        "end": round(float(times[i - 1]), 2),
                        "note": librosa.midi_to_note(int(midi[start]), unicode=False),
                        "hz": round(hz, 1),
                    }
                )
            start = i
    return segments


def track_pitch(audio: Audio, settings: dict) -> dict:
    return pitch_record(*frame_f0(audio, settings), audio.sample_rate, settings)


def pitch_record(f0: np.ndarray, times: np.ndarray, sample_rate: int, settings: dict) -> dict:
    step = max(1, int(round(settings["report_every_s"] * sample_rate / settings["hop_length"])))
    track = [{"time": round(float(t), 2), "hz": round(float(h), 1)} for t, h in zip(times[::step], f0[::step]) if h > 0]
    return {"f0": track, "notes": note_segments(f0, times, settings["min_note_s"])}


_BACKEND = Backend(
    name="librosa-piptrack",
    library_version=package_version("librosa"),
    sample_rate=22050,
    load=lambda settings: None,
    infer=lambda model, audio, settings: track_pitch(audio, settings),
    default_settings={
        "n_fft": 4096,
        "hop_length": 256,
        "fmin": 60.0,
        "fmax": 2000.0,
        "threshold": 0.1,
        "harmonic_ratio": 0.25,
        "report_every_s": 0.5,
        "min_note_s": 0.12,
    },
)


def present(output: dict) -> dict:
    """Appendix B: ``{"timestamp": t, "fundamental frequency": "520.91 Hz"}`` per frame, and the notes
    in the same style (``timestamp`` a span)."""
    return {
        "f0": [{"timestamp": p["time"], "fundamental frequency": f"{p['hz']:.2f} Hz"} for p in output["f0"]],
        "notes": [
            {"timestamp": [n["start"], n["end"]], "note": n["note"], "fundamental frequency": f"{n['hz']:.2f} Hz"}
            for n in output["notes"]
        ],
    }


SPEC = ToolSpec(
    id="pitch",
    paper_index=4,
    description=DESCRIPTION,
    domains=("music", "sound"),
    present=present,
    output="{f0: [{time, hz}], notes: [{start, end, note, hz}]}",
    backends={"embedded": _BACKEND, "cluster": _BACKEND},
)

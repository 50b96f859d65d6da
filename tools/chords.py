"""T3 chords: madmom chord recognition, as timestamped segments ``{start, end, chord}``.

``cluster`` is the paper's CNN features + CRF decoder; ``embedded`` uses madmom's deep-chroma + CRF
recogniser, which is about 100x faster on CPU and robust on synthesised tones.  Both models ship
inside the madmom package (CC BY-NC-SA: non-commercial use only).  madmom resamples through an
ffmpeg subprocess unless fed 44.1 kHz, so the loader resamples first and we pass a ``Signal``.
"""

from __future__ import annotations

from .audio import Audio
from .base import Backend, ToolSpec, package_version
from .notation import chord_symbol

DESCRIPTION = "Recognises the chords played in music (e.g. C:maj, A:min) with their start and end times in seconds."


def _load(kind: str):
    def load(settings: dict):
        from ._madmom_shim import import_madmom

        import_madmom()
        if kind == "deepchroma":
            from madmom.audio.chroma import DeepChromaProcessor
            from madmom.features.chords import DeepChromaChordRecognitionProcessor

            return DeepChromaProcessor(), DeepChromaChordRecognitionProcessor()
        from madmom.features.chords import CNNChordFeatureProcessor, CRFChordRecognitionProcessor

        return CNNChordFeatureProcessor(), CRFChordRecognitionProcessor()

    return load


def snap_boundaries(segments: list[dict], audio: Audio, max_shift: float) -> list[dict]:
    """Move each chord change to the strongest note onset within ``max_shift`` seconds.

    Deep-chroma frames (10 fps, wide context) blur a change between chords that share notes
    (A minor -> F major) by up to half a second; the onset envelope knows when the hands moved.
    """
    import librosa
    import numpy as np

    if max_shift <= 0 or len(segments) < 2:
        return segments
    hop = 512
    envelope = librosa.onset.onset_strength(y=audio.samples, sr=audio.sample_rate, hop_length=hop)
    peaks = librosa.onset.onset_detect(onset_envelope=envelope, sr=audio.sample_rate, hop_length=hop)
    times = librosa.frames_to_time(peaks, sr=audio.sample_rate, hop_length=hop)
    strength = envelope[peaks]
    for left, right in zip(segments, segments[1:]):
        near = np.abs(times - right["start"]) <= max_shift
        if near.any() and left["start"] < times[near][np.argmax(strength[near])] < right["end"]:
            left["end"] = right["start"] = round(float(times[near][np.argmax(strength[near])]), 2)
    return segments


def recognise_chords(model, audio: Audio, settings: dict) -> list[dict]:
    from madmom.audio.signal import Signal

    features, decoder = model
    decoded = decoder(features(Signal(audio.samples, sample_rate=audio.sample_rate, num_channels=1)))
    segments = [
        {"start": round(float(s), 2), "end": round(float(e), 2), "chord": str(label)} for s, e, label in decoded
    ]
    return snap_boundaries(segments, audio, settings["snap_to_onsets_s"])


def _backend(name: str, kind: str, snap: float) -> Backend:
    return Backend(
        name=name,
        library_version=package_version("madmom"),
        sample_rate=44100,
        load=_load(kind),
        infer=recognise_chords,
        default_settings={"snap_to_onsets_s": snap},
    )


def present(output: list) -> list:
    """Appendix B's shape, ``{"timestamp": [s, e], "value": "Bb"}`` per chord segment, the label written as
    a chord symbol (madmom's ``A#:maj`` is ``Bb``, ``A#:min`` is ``Bbm``; :mod:`tools.notation`)."""
    return [{"timestamp": [s["start"], s["end"]], "value": chord_symbol(s["chord"])} for s in output]


SPEC = ToolSpec(
    id="chords",
    paper_index=2,
    description=DESCRIPTION,
    domains=("music",),
    present=present,
    output="[{start, end, chord}]",
    backends={
        "embedded": _backend("madmom-deepchroma-crf", "deepchroma", 0.75),
        "cluster": _backend("madmom-cnn-crf", "cnn", 0.0),
    },
)

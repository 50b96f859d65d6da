"""T3 chords: madmom chord recognition, as timestamped segments ``{start, end, chord}``.

``cluster`` is the paper's CNN features + CRF decoder; ``embedded`` uses madmom's deep-chroma + CRF
recogniser, which is about 100x faster on CPU and robust on synthesised tones.  Both models ship
inside the madmom package (CC BY-NC-SA: non-commercial use only).  madmom resamples through an
ffmpeg subprocess unless fed 44.1 kHz, so the loader resamples first and we pass a ``Signal``.
"""
from __future__ import annotations

from .audio import Audio
from .base import Backend, ToolSpec, package_version

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


def recognise_chords(model, audio: Audio, settings: dict) -> list[dict]:
    from madmom.audio.signal import Signal

    features, decoder = model
    segments = decoder(features(Signal(audio.samples, sample_rate=audio.sample_rate, num_channels=1)))
    return [{"start": round(float(s), 2), "end": round(float(e), 2), "chord": str(label)} for s, e, label in segments]


def _backend(name: str, kind: str) -> Backend:
    return Backend(name=name, library_version=package_version("madmom"), sample_rate=44100,
                   load=_load(kind), infer=recognise_chords)


SPEC = ToolSpec(id="chords", index=2, description=DESCRIPTION, backends={
    "embedded": _backend("madmom-deepchroma-crf", "deepchroma"),
    "cluster": _backend("madmom-cnn-crf", "cnn"),
})

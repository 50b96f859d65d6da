#!/usr/bin/env python
"""Fit the embedded diarization estimator's feature scales and weights (prints them; not run by tests).

Calibration data: espeak-ng monologues from ``CALIBRATION_VOICES`` at several pitches, each sentence
at its own rate, on sentences of this script's own, cut into the segments the estimator itself
sees (voice activity, then pauses).  The embedded benchmark's generator must not use these voices
(a test checks the sets are disjoint), so the estimator is never fitted on benchmark audio.

For every feature: the within-speaker spread of segment vectors (same voice and pitch, different
sentences) and the between-speaker spread; the estimator divides by the within spread and weighs
each feature by between / within (a diagonal Fisher discriminant).

Usage: .venv/bin/python -m scripts.calibration.speakers
"""

from __future__ import annotations

import itertools

import numpy as np

from . import CALIBRATION_VOICES

PITCHES = (25, 50, 75)
SENTENCES = (
    "Could you pass me the salt please?",
    "The weather has been strange all week.",
    "I left the report on your desk, this morning.",
    "Are we meeting the others at the station?",
    "Nobody told me the shop was closed!",
    "Turn the music down a little.",
    "Well, that is a surprise.",
    "Which way is the harbour, do you know?",
)


def main() -> None:
    import io
    import subprocess

    import librosa
    import soundfile as sf

    from tools.speakers import frame_features, segment_vector, speech_regions

    vectors: dict = {}
    for voice, pitch in itertools.product(CALIBRATION_VOICES, PITCHES):
        pieces = []
        for k, sentence in enumerate(SENTENCES):
            wav = subprocess.run(
                ["espeak-ng", "-v", voice, "-p", str(pitch), "-s", str(135 + 8 * k), "--stdout", sentence],
                capture_output=True,
                check=True,
            ).stdout
            y, sr = sf.read(io.BytesIO(wav), dtype="float32")
            pieces += [librosa.resample(y, orig_sr=sr, target_sr=16000), np.zeros(8000, dtype=np.float32)]
        y = np.concatenate(pieces)
        frames = frame_features(y, 16000, 160, scales=None)
        for a, b in speech_regions(y, 16000, 160, -30.0, 0.15, 0.3):
            vectors.setdefault((voice, pitch), []).append(segment_vector(frames[a : min(b, len(frames))]))
    within = np.concatenate(
        [np.abs(np.subtract(*pair)) for v in vectors.values() for pair in itertools.combinations(v, 2)]
    )
    within = within.reshape(-1, len(next(iter(vectors.values()))[0]))
    means = np.array([np.mean(v, axis=0) for v in vectors.values()])
    between = np.abs(means[:, None] - means[None]).reshape(-1, means.shape[1])
    between = between[between.sum(1) > 0]
    scales = within.mean(0)
    weights = between.mean(0) / scales
    weights = weights / weights.mean()
    print("FEATURE_SCALES =", np.round(scales, 2).tolist())
    print("FEATURE_WEIGHTS =", np.round(weights, 2).tolist())

    def dist(a, b):
        return np.sqrt(np.average(((a - b) / scales) ** 2, weights=weights))

    w = [dist(*p) for v in vectors.values() for p in itertools.combinations(v, 2)]
    b = [dist(x, y) for k1, k2 in itertools.combinations(vectors, 2) for x in vectors[k1][:2] for y in vectors[k2][:2]]
    print("within-speaker distance percentiles 50/90/99:", np.round(np.percentile(w, [50, 90, 99]), 2))
    print("between-speaker distance percentiles 1/5/10/50:", np.round(np.percentile(b, [1, 5, 10, 50]), 2))


if __name__ == "__main__":
    main()

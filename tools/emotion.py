"""T2 emotion: the speaker's emotion as a label with scores.

``cluster``: the paper's emotion2vec_plus_large through funasr (``model_id`` a hub id or a local
model directory with ``config.yaml`` + ``model.pt``).

``embedded``: no speech-emotion model ships in any registry package, so this backend is an
honest, hand-set *prosody estimator*, not a learned model: it measures pitch level and range
(YIN), loudness, and syllable rate, plus YAMNet's vocal classes (laughter, crying, shouting,
whispering), and picks the nearest of four prototype profiles (neutral, happy, sad, angry) in
that feature space.  Its record says ``"method": "prosody-prototypes"`` so no one mistakes it for
emotion2vec.
"""
from __future__ import annotations

import numpy as np

from .audio import Audio
from .base import Backend, ToolSpec, package_version

DESCRIPTION = "Recognises the emotion expressed by a speaker's voice (e.g. neutral, happy, sad, angry)."

# Feature order: pitch (semitones re 100 Hz), pitch range (semitones), loudness (dBFS), rate (onsets/s).
FEATURE_SCALES = np.array([1.5, 3.0, 6.0, 2.0])
VOCAL_CUES = {"happy": ("Laughter", "Giggle", "Chuckle, chortle"), "sad": ("Crying, sobbing", "Whimper", "Sigh"),
              "angry": ("Shout", "Yell", "Screaming", "Growling")}


def prosody_features(audio: Audio) -> np.ndarray:
    import librosa

    y, sr = audio.samples, audio.sample_rate
    rms = librosa.feature.rms(y=y, frame_length=1024, hop_length=256)[0]
    active = rms > 0.1 * rms.max()
    f0 = librosa.yin(y, fmin=60, fmax=500, sr=sr, frame_length=1024, hop_length=256)
    n = min(len(f0), len(active))
    voiced = f0[:n][active[:n]]
    semitones = 12 * np.log2(np.maximum(voiced, 1e-3) / 100.0) if voiced.size else np.zeros(1)
    level = float(np.median(semitones))
    spread = float(np.subtract(*np.percentile(semitones, [90, 10]))) / 2.0
    loud = float(20 * np.log10(np.sqrt(np.mean(y ** 2)) + 1e-9))
    onsets = librosa.onset.onset_detect(y=y, sr=sr, hop_length=256, units="time")
    speaking_s = max(active.sum() * 256 / sr, 0.25)
    return np.array([level, spread, loud, len(onsets) / speaking_s])


def estimate_emotion(audio: Audio, settings: dict) -> dict:
    from .yamnet import YamNet, class_names

    features = prosody_features(audio)
    prototypes = {k: np.asarray(v, dtype=float) for k, v in settings["prototypes"].items()}
    distance = {k: float(np.linalg.norm((features - p) / FEATURE_SCALES)) for k, p in prototypes.items()}
    peak = dict(zip(class_names(), YamNet.load().scores(audio.samples).max(axis=0)))
    for label, cues in VOCAL_CUES.items():
        if label in distance:
            distance[label] -= settings["vocal_cue_weight"] * max(float(peak.get(c, 0.0)) for c in cues)
    logits = -np.array(list(distance.values()))
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    scores = {k: round(float(p), 3) for k, p in zip(distance, probs)}
    return {"label": max(scores, key=scores.get), "scores": scores, "method": "prosody-prototypes",
            "features": {"pitch_st_re_100hz": round(features[0], 1), "pitch_range_st": round(features[1], 1),
                         "loudness_dbfs": round(features[2], 1), "onsets_per_s": round(features[3], 2)}}


def _load_funasr(settings: dict):
    from funasr import AutoModel

    return AutoModel(model=settings["model_id"], device=settings["device"], disable_update=True,
                     disable_pbar=True, log_level="ERROR")


def _infer_funasr(model, audio: Audio, settings: dict) -> dict:
    result = model.generate(audio.samples, granularity="utterance", extract_embedding=False)[0]
    # emotion2vec labels read "生气/angry"; keep the English half.
    scores = {str(label).split("/")[-1]: round(float(s), 3) for label, s in zip(result["labels"], result["scores"])}
    return {"label": max(scores, key=scores.get), "scores": scores, "method": "emotion2vec"}


SPEC = ToolSpec(id="emotion", index=1, description=DESCRIPTION, backends={
    "embedded": Backend(name="prosody-prototypes", library_version=package_version("librosa"), sample_rate=16000,
                        load=lambda settings: None, infer=lambda model, audio, settings: estimate_emotion(audio, settings),
                        default_settings={"vocal_cue_weight": 2.0, "prototypes": {
                            "neutral": [-1.0, 2.5, -25.0, 8.7], "happy": [6.7, 1.5, -25.0, 9.3],
                            "sad": [-4.3, 8.0, -26.0, 6.9], "angry": [3.2, 2.0, -22.0, 9.2]}}),
    "cluster": Backend(name="funasr-emotion2vec", library_version=package_version("funasr"), sample_rate=16000,
                       load=_load_funasr, infer=_infer_funasr, uses_gpu=True,
                       default_settings={"model_id": "iic/emotion2vec_plus_large", "device": "cuda"}),
})

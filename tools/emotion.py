"""T2 emotion: the speaker's emotion as a label with scores.

``cluster``: the paper's emotion2vec_plus_large through funasr (``model_id`` a hub id or a local
model directory with ``config.yaml`` + ``model.pt``).

``embedded``: no speech-emotion model ships in any registry package, so this backend is an honest
*prosody estimator*, not a learned model of emotion: it measures pitch level and range (YIN),
loudness relative to the peak, syllable rate and pauses, and scores each of four emotions
(neutral, happy, sad, angry) with a Gaussian fitted by ``python -m scripts.calibration.emotion`` on
espeak-ng voices and acting settings the embedded benchmark never uses (``emotion_prosody.json``).
Its record says ``"method": "prosody-gaussians"`` so no one mistakes it for emotion2vec.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from .audio import Audio
from .base import Backend, ToolSpec, package_version

DESCRIPTION = "Recognises the emotion expressed by a speaker's voice (e.g. neutral, happy, sad, angry)."
FEATURES = ("pitch_st_re_100hz", "pitch_range_st", "loudness_re_peak_db", "onsets_per_s", "pause_share")
TABLE = Path(__file__).with_name("emotion_prosody.json")


@functools.lru_cache(maxsize=1)
def fitted_table() -> dict:
    return json.loads(TABLE.read_text())


def prosody_features(audio: Audio) -> np.ndarray:
    """Pitch level and range (semitones), RMS relative to the peak (dB), onsets per speaking second,
    and the share of the utterance spent in pauses."""
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
    loud = float(20 * np.log10(np.sqrt(np.mean(y**2)) + 1e-9) - 20 * np.log10(np.abs(y).max() + 1e-9))
    onsets = librosa.onset.onset_detect(y=y, sr=sr, hop_length=256, units="time")
    speaking_s = max(active.sum() * 256 / sr, 0.25)
    first, last = np.flatnonzero(active)[[0, -1]] if active.any() else (0, len(active) - 1)
    pauses = 1.0 - active[first : last + 1].mean() if last > first else 0.0
    return np.array([level, spread, loud, len(onsets) / speaking_s, float(pauses)])


def estimate_emotion(audio: Audio, settings: dict) -> dict:
    table = fitted_table()
    features = prosody_features(audio)
    scales = np.asarray(table["scales"])
    logits = {k: -0.5 * float(np.sum(((features - np.asarray(m)) / scales) ** 2)) for k, m in table["means"].items()}
    top = max(logits.values())
    probs = {k: np.exp((v - top) / settings["temperature"]) for k, v in logits.items()}
    total = sum(probs.values())
    scores = {k: round(float(p / total), 3) for k, p in probs.items()}
    return {
        "label": max(scores, key=scores.get),
        "scores": scores,
        "method": "prosody-gaussians",
        "features": {name: round(float(x), 2) for name, x in zip(FEATURES, features)},
    }


def _table_digest() -> str:
    import hashlib

    return hashlib.sha256(TABLE.read_bytes()).hexdigest()[:12] if TABLE.exists() else "missing"


def _load_funasr(settings: dict):
    from funasr import AutoModel

    return AutoModel(
        model=settings["model_id"], device=settings["device"], disable_update=True, disable_pbar=True, log_level="ERROR"
    )


def _infer_funasr(model, audio: Audio, settings: dict) -> dict:
    result = model.generate(audio.samples, granularity="utterance", extract_embedding=False)[0]
    # emotion2vec labels read "生气/angry"; keep the English half.
    scores = {str(label).split("/")[-1]: round(float(s), 3) for label, s in zip(result["labels"], result["scores"])}
    return {"label": max(scores, key=scores.get), "scores": scores, "method": "emotion2vec"}


def present(output: dict) -> dict:
    """Appendix B: the label and its confidence."""
    return {"value": output["label"], "confidence": output["scores"].get(output["label"])}


SPEC = ToolSpec(
    id="emotion",
    paper_index=1,
    description=DESCRIPTION,
    domains=("speech",),
    present=present,
    output="{label, scores: {label: p}, method}",
    backends={
        "embedded": Backend(
            name="prosody-gaussians",
            library_version=package_version("librosa"),
            sample_rate=16000,
            load=lambda settings: fitted_table(),
            infer=lambda model, audio, settings: estimate_emotion(audio, settings),
            default_settings={"temperature": 1.0, "table_sha": _table_digest()},
        ),
        "cluster": Backend(
            name="funasr-emotion2vec",
            library_version=package_version("funasr"),
            sample_rate=16000,
            load=_load_funasr,
            infer=_infer_funasr,
            uses_gpu=True,
            default_settings={"model_id": "iic/emotion2vec_plus_large", "device": "cuda"},
        ),
    },
)

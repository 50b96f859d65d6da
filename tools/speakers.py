"""T7 speakers: speaker diarization, who speaks when and how many speakers there are.

Output: ``{"num_speakers": N, "turns": [{"start": s, "end": e, "speaker": "S1"}, ...]}``, speakers
labelled S1, S2, ... in order of first appearance.

``cluster``: pyannote.audio's diarization pipeline (``pyannote/speaker-diarization-3.1``,
``pyannote/speaker-diarization-community-1``, or a local folder with its ``config.yaml``); the clip
is handed over in memory, so neither torchcodec nor a file path is needed.

``embedded``: no diarization weights ship in any registry package, so this backend is an honest
*estimator*, named for what it is (``energy-vad-mfcc-clustering``): energy voice activity, then
short overlapping windows of speech described by MFCC statistics and pitch, then agglomerative
clustering with a distance threshold (which also decides how many speakers there are), then
smoothing of the window labels into turns.  It has never seen a diarization corpus.
"""

from __future__ import annotations

import numpy as np

from .audio import Audio
from .base import Backend, ToolSpec, package_version

DESCRIPTION = (
    "Speaker diarization: tells who speaks when, as turns with start and end times and a speaker "
    "label, and counts how many different people speak."
)


def _relabel(turns: list[dict]) -> dict:
    """Speakers named S1, S2, ... by first appearance; adjacent turns of one speaker merged."""
    names: dict = {}
    merged: list[dict] = []
    for turn in sorted(turns, key=lambda t: t["start"]):
        name = names.setdefault(turn["speaker"], f"S{len(names) + 1}")
        if merged and merged[-1]["speaker"] == name and turn["start"] - merged[-1]["end"] < 0.05:
            merged[-1]["end"] = max(merged[-1]["end"], round(turn["end"], 2))
        else:
            merged.append({"start": round(turn["start"], 2), "end": round(turn["end"], 2), "speaker": name})
    return {"num_speakers": len(names), "turns": merged}


# ---- embedded estimator ------------------------------------------------------------------------------
# Per-feature spread of one speaker's segment vectors (MFCC 2..19 means, median pitch in semitones)
# across utterances, and each feature's between/within-speaker ratio, measured by
# ``python -m scripts.calibration.speakers`` on espeak-ng voices the embedded benchmark never uses.
FEATURE_SCALES = np.array(
    [
        14.65,
        16.53,
        13.38,
        9.92,
        12.25,
        7.33,
        8.04,
        5.79,
        5.07,
        5.25,
        5.56,
        4.15,
        4.82,
        4.88,
        3.96,
        4.85,
        4.08,
        2.77,
        1.26,
    ]
)
FEATURE_WEIGHTS = np.array(
    [0.73, 0.58, 0.85, 0.62, 0.91, 1.06, 0.65, 0.82, 0.65, 0.73, 0.53, 1.59, 0.75, 0.51, 1.31, 0.62, 0.75, 1.95, 3.38]
)
_METRIC = np.sqrt(FEATURE_WEIGHTS / FEATURE_WEIGHTS.sum())  # Euclidean distance of scaled * _METRIC = weighted RMS


def speech_regions(
    samples: np.ndarray, sr: int, hop: int, threshold_db: float, min_gap_s: float, min_region_s: float
) -> list[tuple[int, int]]:
    """(start, end) frame ranges louder than ``threshold_db`` below the clip's loud frames; gaps
    shorter than ``min_gap_s`` are bridged, regions shorter than ``min_region_s`` dropped."""
    import librosa

    rms = librosa.feature.rms(y=samples, frame_length=2 * hop, hop_length=hop)[0]
    db = 20 * np.log10(rms + 1e-9)
    active = db > np.percentile(db, 95) + threshold_db
    regions, start, gap = [], None, int(round(min_gap_s * sr / hop))
    for f, on in enumerate(np.append(active, False)):
        if on and start is None:
            if regions and f - regions[-1][1] <= gap:
                start = regions.pop()[0]
            else:
                start = f
        elif not on and start is not None:
            regions.append((start, f))
            start = None
    return [(a, b) for a, b in regions if (b - a) * hop / sr >= min_region_s]


def frame_features(samples: np.ndarray, sr: int, hop: int, scales: np.ndarray | None = FEATURE_SCALES) -> np.ndarray:
    """``[frames, 20]``: MFCC 2..19 and pitch (semitones re 100 Hz, YIN), divided by ``scales``, then a
    0/1 column marking voiced frames (loud, with a pitch that holds steady over three frames)."""
    import librosa

    mfcc = librosa.feature.mfcc(y=samples, sr=sr, n_mfcc=20, n_fft=512, hop_length=hop)[2:]
    f0 = librosa.yin(samples, fmin=60, fmax=400, sr=sr, frame_length=1024, hop_length=hop)
    rms = librosa.feature.rms(y=samples, frame_length=2 * hop, hop_length=hop)[0]
    n = min(mfcc.shape[1], len(f0), len(rms))
    pitch = 12 * np.log2(f0[:n] / 100.0)
    steady = np.abs(np.diff(pitch, prepend=pitch[0])) < 0.7
    steady &= np.roll(steady, -1)
    voiced = steady & (rms[:n] > 0.1 * np.percentile(rms[:n], 95))
    frames = np.vstack([mfcc[:, :n], pitch[None]]).T
    if scales is not None:
        frames = frames / scales
    return np.hstack([frames, voiced[:, None].astype(frames.dtype)])


def segment_vector(frames: np.ndarray) -> np.ndarray:
    """A stretch of speech as one vector: mean spectral shape and median pitch of its voiced frames
    (of all its frames when fewer than 10 are voiced)."""
    voiced = frames[frames[:, -1] > 0]
    use = voiced if len(voiced) >= 10 else frames
    return np.append(use[:, :-2].mean(0), np.median(use[:, -2]))


def voice_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Weighted RMS difference of two scaled segment vectors (about 1.2 within a speaker, 6 between)."""
    return float(np.linalg.norm((a - b) * _METRIC))


def change_points(frames: np.ndarray, start: int, end: int, window: int, threshold: float) -> list[int]:
    """Cut ``[start, end)`` where the voices of the ``window`` frames either side differ most,
    recursively, while that difference exceeds ``threshold`` (speaker changes without a pause)."""
    if end - start < 2 * window:
        return []
    candidates = list(range(start + window, end - window + 1, max(window // 8, 1)))
    scores = [
        voice_distance(segment_vector(frames[c - window : c]), segment_vector(frames[c : c + window]))
        for c in candidates
    ]
    best = int(np.argmax(scores))
    if scores[best] < threshold:
        return []
    cut = candidates[best]
    return (
        change_points(frames, start, cut, window, threshold)
        + [cut]
        + change_points(frames, cut, end, window, threshold)
    )


def cluster_segments(frames: np.ndarray, segments: list[tuple[int, int]], threshold: float) -> np.ndarray:
    """Agglomerative clustering in which a cluster's voice is the vector of all its frames (so it
    grows more reliable as it grows); merging stops when the closest two voices differ by more than
    ``threshold``.  Returns labels 1..K in segment order."""
    clusters = [[i] for i in range(len(segments))]

    def voice(members):
        return segment_vector(np.concatenate([frames[segments[i][0] : segments[i][1]] for i in members]))

    voices = [voice(c) for c in clusters]
    while len(clusters) > 1:
        pairs = [
            (voice_distance(voices[i], voices[j]), i, j)
            for i in range(len(clusters))
            for j in range(i + 1, len(clusters))
        ]
        distance, i, j = min(pairs)
        if distance > threshold:
            break
        clusters[i] += clusters.pop(j)
        voices.pop(j)
        voices[i] = voice(clusters[i])
    labels = np.zeros(len(segments), dtype=int)
    for k, members in enumerate(sorted(clusters, key=min), start=1):
        labels[members] = k
    return labels


def viterbi(loglik: np.ndarray, switch_penalty: float) -> np.ndarray:
    """Most likely speaker per frame given ``[frames, K]`` log-likelihoods and a cost per change."""
    frames, k = loglik.shape
    score = loglik[0].copy()
    back = np.zeros((frames, k), dtype=int)
    for f in range(1, frames):
        stay = score
        move = score.max() - switch_penalty
        back[f] = np.where(stay >= move, np.arange(k), int(score.argmax()))
        score = np.maximum(stay, move) + loglik[f]
    path = np.zeros(frames, dtype=int)
    path[-1] = int(score.argmax())
    for f in range(frames - 1, 0, -1):
        path[f - 1] = back[f, path[f]]
    return path


def frame_loglik(frames: np.ndarray, labels: np.ndarray, speakers: list[int]) -> np.ndarray:
    """Diagonal-Gaussian log-likelihood of every frame under each speaker's frames (weighted features,
    each feature's squared deviation capped so unvoiced pitch frames cannot dominate)."""
    columns = []
    for k in speakers:
        own = frames[labels == k, :-1]
        mean, var = own.mean(0), own.var(0) + 1e-3
        z2 = np.minimum((frames[:, :-1] - mean) ** 2 / var, 9.0)
        columns.append(-0.5 * (z2 + np.log(var)) @ FEATURE_WEIGHTS)
    return np.stack(columns, axis=1)


def estimate_speakers(audio: Audio, settings: dict) -> dict:
    """Voice activity -> segments cut at pauses and at clear voice changes -> agglomerative clustering
    (decides the count) -> Viterbi resegmentation of the speech frames under per-speaker Gaussians
    (moves the turn boundaries to where the voices change)."""
    sr, hop = audio.sample_rate, int(settings["hop_s"] * audio.sample_rate)
    regions = speech_regions(
        audio.samples, sr, hop, settings["vad_threshold_db"], settings["min_gap_s"], settings["min_turn_s"]
    )
    frames = frame_features(audio.samples, sr, hop)
    regions = [(a, min(b, len(frames))) for a, b in regions if a < len(frames)]
    if not regions:
        return {"num_speakers": 0, "turns": []}
    window = int(settings["change_window_s"] * sr / hop)
    segments = []
    for a, b in regions:
        cuts = [a] + change_points(frames, a, b, window, settings["change_threshold"]) + [b]
        segments += list(zip(cuts, cuts[1:]))
    labels = cluster_segments(frames, segments, settings["cluster_threshold"])
    frame_label = np.zeros(len(frames), dtype=int)
    for (s, e), k in zip(segments, labels):
        frame_label[s:e] = k
    passes = settings["resegment_passes"]
    while passes > 0:
        totals = {k: (frame_label == k).sum() * hop / sr for k in set(frame_label[frame_label > 0].tolist())}
        speakers = [k for k, seconds in totals.items() if seconds >= settings["min_speaker_s"]] or [
            max(totals, key=totals.get)
        ]
        loglik = frame_loglik(frames, frame_label, speakers)
        for a, b in regions:
            frame_label[a:b] = np.asarray(speakers)[viterbi(loglik[a:b], settings["switch_penalty"])]
        passes -= 1
        if passes == 0 and merge_closest(frames, frame_label, settings["cluster_threshold"]):
            passes = 1  # two voices were one speaker after all: resegment once more without the split
    return _relabel(frame_turns(frame_label, hop / sr, settings["min_turn_s"]))


def merge_closest(frames: np.ndarray, frame_label: np.ndarray, threshold: float) -> bool:
    """Merge the two speakers whose voices (all their frames now) are closest, if within ``threshold``."""
    speakers = sorted(set(frame_label[frame_label > 0].tolist()))
    voices = {k: segment_vector(frames[frame_label == k]) for k in speakers}
    pairs = [(voice_distance(voices[a], voices[b]), a, b) for i, a in enumerate(speakers) for b in speakers[i + 1 :]]
    if not pairs or min(pairs)[0] > threshold:
        return False
    _, keep, gone = min(pairs)
    frame_label[frame_label == gone] = keep
    return True


def frame_turns(frame_label: np.ndarray, frame_s: float, min_turn_s: float) -> list[dict]:
    """Runs of one speaker label (0 = silence) as turns; a run shorter than ``min_turn_s`` inside
    speech is given to the speaker before it (or after it, at the start of a stretch)."""
    labels = frame_label.copy()
    runs = []
    for f in range(len(labels) + 1):
        if f == len(labels) or not runs or labels[f] != labels[runs[-1][0]]:
            if runs:
                runs[-1][1] = f
            if f < len(labels):
                runs.append([f, None])
    for k, (s, e) in enumerate(runs):
        if labels[s] and (e - s) * frame_s < min_turn_s:
            before = labels[runs[k - 1][0]] if k and labels[runs[k - 1][0]] else 0
            after = labels[runs[k + 1][0]] if k + 1 < len(runs) and labels[runs[k + 1][0]] else 0
            if before or after:
                labels[s:e] = before or after
    turns, start = [], None
    for f in range(len(labels) + 1):
        current = labels[f] if f < len(labels) else 0
        if start is not None and current != labels[start]:
            if (f - start) * frame_s >= min_turn_s:
                turns.append({"start": start * frame_s, "end": f * frame_s, "speaker": int(labels[start])})
            start = None
        if start is None and current:
            start = f
    return turns


# ---- pyannote.audio (the cluster backend) ------------------------------------------------------------
def _load_pyannote(settings: dict):
    import os

    import torch
    from pyannote.audio import Pipeline

    token = os.environ.get(settings["token_env"]) or None  # read here, never logged or stored
    pipeline = Pipeline.from_pretrained(settings["model_id"], token=token)
    if pipeline is None:
        raise RuntimeError(
            f"pyannote could not load {settings['model_id']!r} "
            f"(gated model: accept its terms, set ${settings['token_env']})"
        )
    return pipeline.to(torch.device(settings["device"]))


def _infer_pyannote(pipeline, audio: Audio, settings: dict) -> dict:
    import torch

    options = {k: settings[k] for k in ("num_speakers", "min_speakers", "max_speakers") if settings.get(k)}
    result = pipeline(
        {"waveform": torch.from_numpy(audio.samples).unsqueeze(0), "sample_rate": audio.sample_rate}, **options
    )
    annotation = getattr(result, "speaker_diarization", result)  # 4.x returns DiarizeOutput, 3.x an Annotation
    turns = [
        {"start": float(seg.start), "end": float(seg.end), "speaker": str(label)}
        for seg, _, label in annotation.itertracks(yield_label=True)
    ]
    return _relabel(turns)


def present(output: dict) -> dict:
    """Reasoner view: the count and ``{"timestamp": [s, e], "speaker"}`` per turn."""
    return {
        "num_speakers": output["num_speakers"],
        "turns": [{"timestamp": [t["start"], t["end"]], "speaker": t["speaker"]} for t in output["turns"]],
    }


SPEC = ToolSpec(
    id="speakers",
    paper_index=6,
    description=DESCRIPTION,
    domains=("speech",),
    present=present,
    output="{num_speakers, turns: [{start, end, speaker}]}",
    backends={
        "embedded": Backend(
            name="energy-vad-mfcc-clustering",
            library_version=package_version("librosa"),
            sample_rate=16000,
            load=lambda settings: None,
            infer=lambda model, audio, settings: estimate_speakers(audio, settings),
            default_settings={
                "hop_s": 0.01,
                "vad_threshold_db": -30.0,
                "min_gap_s": 0.15,
                "min_turn_s": 0.3,
                "change_window_s": 1.0,
                "change_threshold": 3.0,
                "cluster_threshold": 2.3,
                "min_speaker_s": 1.0,
                "resegment_passes": 2,
                "switch_penalty": 40.0,
            },
        ),
        "cluster": Backend(
            name="pyannote-diarization",
            library_version=package_version("pyannote.audio"),
            sample_rate=16000,
            load=_load_pyannote,
            infer=_infer_pyannote,
            uses_gpu=True,
            default_settings={
                "model_id": "pyannote/speaker-diarization-3.1",
                "device": "cuda",
                "token_env": "HF_TOKEN",
                "num_speakers": None,
                "min_speakers": None,
                "max_speakers": None,
            },
        ),
    },
)

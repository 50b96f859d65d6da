"""The shapes that size a Qwen2-Audio model for the memory plan (:mod:`.arithmetic`): parameters
counted on the meta device from a config (a local ``config.json`` or a known hub id's published
one), the decoder's and the audio tower's widths, and each layer's activation bytes."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

AUDIO_FRAMES = 1500
"""Audio-tower positions per clip: Whisper's features are padded to 30 s (3,000 frames), halved by the
stride-2 convolution."""

KNOWN_CONFIGS = {
    # The published config.json of Qwen/Qwen2-Audio-7B-Instruct (the fields that size the model).
    "Qwen/Qwen2-Audio-7B-Instruct": {
        "model_type": "qwen2_audio",
        "audio_token_index": 151646,
        "audio_config": {
            "model_type": "qwen2_audio_encoder",
            "d_model": 1280,
            "encoder_layers": 32,
            "encoder_attention_heads": 20,
            "encoder_ffn_dim": 5120,
            "num_mel_bins": 128,
            "max_source_positions": 1500,
        },
        "text_config": {
            "model_type": "qwen2",
            "vocab_size": 156032,
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": False,
        },
    },
}
TOOL_PARAMETERS = {
    # Parameters of the paper's tool models (their published model cards), loaded in fp32 by the cluster backends.
    "openai/whisper-large-v3": 1.55e9,
    "iic/emotion2vec_plus_large": 0.33e9,
    "MIT/ast-finetuned-audioset-10-10-0.4593": 0.087e9,
}


@dataclass(frozen=True)
class Architecture:
    """What sizes a Qwen2-Audio model: its parameters, its decoder's and its audio tower's shapes."""

    parameters: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    ffn: int = 0
    audio_layers: int = 0
    audio_dim: int = 0
    audio_ffn: int = 0
    linears: tuple = ()
    """(module name, in features, out features) of every linear layer (LoRA's targets)."""

    @classmethod
    def of(cls, model_id: str) -> Architecture:
        """From a local folder's ``config.json`` or a known hub id; the parameters are counted on the
        meta device (no weights are read)."""
        path = Path(model_id) / "config.json"
        if path.is_file():
            return cls.from_config(json.loads(path.read_text()))
        if model_id in KNOWN_CONFIGS:
            return cls.from_config(KNOWN_CONFIGS[model_id])
        raise ValueError(
            f"{model_id}: no config.json there and not a known hub id ({', '.join(KNOWN_CONFIGS)}); "
            "download the model's config.json into a folder and name that folder"
        )

    @classmethod
    def from_config(cls, raw: dict) -> Architecture:
        return _architecture(json.dumps(raw, sort_keys=True))

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def kv_cache_bytes(self, rows: int, tokens: int, dtype_bytes: int, key_bytes: int | None = None) -> int:
        """Keys and values of every decoder layer for ``rows`` sequences of ``tokens``; ``key_bytes`` when
        the keys are wider than the values (fp32 keys under autocast: see :meth:`residual_bytes`)."""
        return self.layers * self.kv_dim * rows * tokens * ((key_bytes or dtype_bytes) + dtype_bytes)

    @staticmethod
    def residual_bytes(dtype_bytes: int, autocast: bool) -> int:
        """Bytes of the residual stream.  Under bf16 autocast over fp32 weights (fp32 masters) the
        embeddings come out fp32 and every residual add promotes to fp32, so the stream, each layer's
        input (what checkpointing saves) and the rotary cos/sin are fp32, and so are the keys after
        RoPE (a bf16 projection times fp32 cos: ``apply_rotary_pos_emb`` in transformers' qwen2)."""
        return 4 if autocast else dtype_bytes

    def layer_training_bytes(self, rows: int, tokens: int, dtype_bytes: int = 2, autocast: bool = False) -> float:
        """What one decoder layer keeps for its backward: the attention block's norm input, its fp32
        upcast and output, q, k, v, the attention output (12 h + 4 kv bytes a token in 16 bits) and
        the MLP block's norm input, upcast, output, gate, up, activation and product (8 h + 8 ffn).
        Under autocast over fp32 weights the norms' inputs and outputs are fp32 and each projection
        keeps its own bf16 cast of its input (q, k, v; gate, up): 26 h + 4 kv + 8 ffn."""
        if autocast:
            return rows * tokens * (26 * self.hidden + 4 * self.kv_dim + 8 * self.ffn)
        return rows * tokens * (20 * self.hidden + 4 * self.kv_dim + 8 * self.ffn) * dtype_bytes / 2

    def layer_inference_bytes(self, rows: int, tokens: int, dtype_bytes: int = 2, autocast: bool = False) -> float:
        """One decoder layer's peak without gradients: the residual stream and the layer's input, the
        MLP's up projection, activation and their product alive at once (4 h + 6 ffn bytes a token;
        8 h + 6 ffn with the fp32 residual stream of autocast)."""
        if autocast:
            return rows * tokens * (8 * self.hidden + 6 * self.ffn)
        return rows * tokens * (4 * self.hidden + 6 * self.ffn) * dtype_bytes / 2

    def adapted(self, lora) -> tuple:
        """(in features, out features) of each linear of one decoder layer that ``lora`` adapts."""
        return _adapted(self, lora.pattern)

    def lora_training_bytes(self, rows: int, tokens: int, lora) -> float:
        """What LoRA's adapters add to one decoder layer's backward (peft's ``lora.Linear.forward`` under
        autocast, bf16 base, fp32 adapters): each adapted linear keeps the bf16 cast of its input that
        ``lora_A`` multiplies (2 bytes an input feature) and, with dropout, dropout's mask (1 byte); and
        while the widest input's adapter runs backward, its input's gradient through ``lora_A`` in bf16,
        through the cast and the dropout in fp32, and summed with the base layer's (2 + 4 + 4 + 2 bytes)."""
        adapted = self.adapted(lora)
        kept = (3 if lora.dropout > 0 else 2) * sum(i for i, _ in adapted)
        return rows * tokens * (kept + 12 * max((i for i, _ in adapted), default=0))

    def lora_inference_bytes(self, rows: int, tokens: int, lora) -> float:
        """What unmerged adapters add to a layer's peak without gradients (peft's ``lora.Linear.forward``,
        fp32 adapters over a bf16 base): at the widest adapted linear, its input cast to fp32 (4 bytes an
        input feature) and ``lora_B``'s fp32 output, scaled, and added to the base output (three fp32
        tensors of the output width alive at once at most, counted as two: 8 bytes an output feature)."""
        return rows * tokens * max((4 * i + 8 * o for i, o in self.adapted(lora)), default=0)

    def lora_parameters(self, lora) -> int:
        """Parameters of LoRA adapters (rank r: r x (in + out) a targeted layer) under ``lora``."""
        return sum(lora.r * (i + o) for name, i, o in self.linears if lora.targets(name))


@functools.lru_cache(maxsize=8)
def _architecture(raw_json: str) -> Architecture:
    import torch
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

    raw = json.loads(raw_json)
    config = Qwen2AudioConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    with torch.device("meta"):
        model = Qwen2AudioForConditionalGeneration(config)
    text, audio = config.text_config, config.audio_config
    return Architecture(
        parameters=sum(p.numel() for p in model.parameters()),
        layers=text.num_hidden_layers,
        hidden=text.hidden_size,
        heads=text.num_attention_heads,
        kv_heads=text.num_key_value_heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
        vocab=text.vocab_size,
        ffn=text.intermediate_size,
        audio_layers=audio.encoder_layers,
        audio_dim=audio.d_model,
        audio_ffn=audio.encoder_ffn_dim,
        linears=tuple(
            (name, m.in_features, m.out_features) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)
        ),
    )


@functools.lru_cache(maxsize=32)
def _adapted(arch: Architecture, pattern: str) -> tuple:
    import re

    return tuple(
        (i, o) for name, i, o in arch.linears if ".layers.0." in name and re.fullmatch(pattern, name) is not None
    )


def audio_tokens(seconds: float) -> int:
    """Qwen2-Audio's audio tokens for a clip: 100 mel frames a second, a stride-2 conv, then 2x pooling."""
    return int(seconds * 100) // 2 // 2

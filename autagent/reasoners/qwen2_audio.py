"""Qwen2-Audio-7B-Instruct (or any Qwen2-Audio checkpoint directory) as the frozen reasoner, in process.

The paper's main reasoner.  ``model_id`` is a hub id on the cluster or a local directory (the tests
build a tiny random one); prompts come from :mod:`autagent.reasoners.prompts`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tools.audio import AudioError, load_audio

from ..data.sample import Sample
from .base import Reply, fingerprint_of
from .prompts import render


@dataclass
class Qwen2AudioConfig:
    model_id: str = "Qwen/Qwen2-Audio-7B-Instruct"
    """Hub id or local folder."""
    device: str = "cuda"
    """Torch device."""
    dtype: str = "bfloat16"
    """Torch dtype name."""
    max_new_tokens: int = 32
    """Reply length."""
    batch_size: int = 4
    """Prompts per generate call (left-padded)."""


class Qwen2AudioReasoner:
    name = "qwen2-audio"

    def __init__(self, config):
        import torch
        from transformers import AutoProcessor, Qwen2AudioForConditionalGeneration

        self.config = config
        self.processor = AutoProcessor.from_pretrained(config.model_id)
        # Batched generation continues every row from its own last prompt token only with left padding.
        self.processor.tokenizer.padding_side = "left"
        dtype = getattr(torch, config.dtype)
        self.model = (
            Qwen2AudioForConditionalGeneration.from_pretrained(config.model_id, dtype=dtype).to(config.device).eval()
        )
        self.sample_rate = self.processor.feature_extractor.sampling_rate
        self._torch = torch

    @property
    def where(self) -> str:
        return f"{self.config.model_id} on {self.config.device}"

    def fingerprint(self) -> str:
        return fingerprint_of(
            self.name, {k: v for k, v in asdict(self.config).items() if k not in ("device", "batch_size")}
        )

    def prompt(self, sample: Sample, records: list[dict] | None) -> str:
        conversation = [
            {
                "role": "user",
                "content": [
                    {"type": "audio", "audio_url": sample.audio},
                    {"type": "text", "text": render(sample.question, sample.choices, records)},
                ],
            }
        ]
        return self.processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)

    def answer_many(self, requests: list[tuple[Sample, list[dict] | None]]) -> list[Reply]:
        replies: list[Reply] = [Reply(None, "not answered")] * len(requests)
        usable = []
        for i, (sample, records) in enumerate(requests):
            try:
                usable.append(
                    (i, self.prompt(sample, records), load_audio(sample.audio, self.sample_rate, 30.0).samples)
                )
            except AudioError as err:
                replies[i] = Reply(None, f"audio: {err}")  # no audio, no answer: an error, scored as wrong
        for start in range(0, len(usable), self.config.batch_size):
            chunk = usable[start : start + self.config.batch_size]
            inputs = self.processor(
                text=[c[1] for c in chunk],
                audio=[c[2] for c in chunk],
                sampling_rate=self.sample_rate,
                return_tensors="pt",
                padding=True,
            )
            inputs = inputs.to(self.config.device)
            with self._torch.no_grad():
                out = self.model.generate(**inputs, max_new_tokens=self.config.max_new_tokens, do_sample=False)
            texts = self.processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
            for (i, _, _), text in zip(chunk, texts):
                replies[i] = Reply(text.strip() or None)
        return replies

"""Any OpenAI-compatible chat endpoint that takes audio (vLLM serving Qwen2-Audio, GPT-4o audio).

The client is the ``openai`` SDK's :class:`~openai.AsyncOpenAI`: its bounded retries with
exponential back-off on 408/409/429/5xx, timeouts and dropped connections, honouring
``Retry-After``, and its per-request timeout.  On top of it, a 200 whose body is not a chat
completion (junk, HTML, a truncated body) is retried the same number of times, which the SDK does
not do.  Requests run concurrently under a semaphore (``max_concurrency``), and a request's payload
(the clip as base64 WAV) is built only once it holds the semaphore, so at most that many exist at
once.  A request that still fails is a :class:`~autagent.reasoners.base.Reply` with an ``error``:
counted, and never cached as an answer.  The API key is read from the environment variable
``api_key_env`` and appears in no log, error message, fingerprint or file.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import os
from dataclasses import asdict, dataclass

from ..data.sample import Sample
from .base import Reply, fingerprint_of
from .prompts import render

log = logging.getLogger(__name__)


@dataclass
class OpenAIConfig:
    base_url: str = "http://localhost:8000/v1"
    """vLLM's OpenAI server, or https://api.openai.com/v1 for GPT-4o."""
    model: str = "Qwen/Qwen2-Audio-7B-Instruct"
    """Model name the server expects."""
    api_key_env: str = "OPENAI_API_KEY"
    """The key is read from this variable, never from config, and never written anywhere."""
    audio_format: str = "input_audio"
    """input_audio (OpenAI) or audio_url (vLLM data URL)."""
    max_concurrency: int = 8
    """Requests in flight at once."""
    timeout_s: float = 60.0
    """Per request."""
    max_retries: int = 3
    """Retries per request (429, 5xx, timeouts, resets: the SDK's own back-off and Retry-After; a malformed
    body: ours); then the request is an error."""
    temperature: float = 0.0
    """Sampling temperature."""
    max_tokens: int = 32
    """Reply length."""

    def __post_init__(self):
        if self.audio_format not in ("input_audio", "audio_url"):
            raise ValueError(
                f"reasoner.openai.audio_format must be input_audio or audio_url, got {self.audio_format!r}"
            )
        if self.max_retries < 0 or self.timeout_s <= 0 or self.max_concurrency < 1:
            raise ValueError("reasoner.openai: max_retries >= 0, timeout_s > 0 and max_concurrency >= 1")


def wav_base64(path: str, sample_rate: int = 16000) -> str:
    import soundfile as sf

    from tools.audio import load_audio

    buffer = io.BytesIO()
    sf.write(buffer, load_audio(path, sample_rate, 30.0).samples, sample_rate, format="WAV", subtype="PCM_16")
    return base64.b64encode(buffer.getvalue()).decode()


def reply_text(body) -> str | None:
    """The assistant's text from a chat-completions body; ``ValueError`` when the body is not one."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as err:
        raise ValueError(f"not a chat completion ({type(err).__name__})") from None
    if isinstance(content, list):  # content parts
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    if content is not None and not isinstance(content, str):
        raise ValueError(f"message content is {type(content).__name__}")
    return content.strip() if content and content.strip() else None


def client(base_url: str, api_key_env: str, max_retries: int, timeout_s: float):
    """An ``AsyncOpenAI`` client for ``base_url`` with the key from ``$api_key_env`` (a local server
    without one gets a placeholder: the SDK insists on a key, vLLM ignores it)."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(
        base_url=base_url, api_key=os.environ.get(api_key_env) or "no-key", max_retries=max_retries, timeout=timeout_s
    )


def failure_name(err: Exception) -> str:
    """A short reason for a request the SDK gave up on: ``HTTP 503``, ``Timeout``, ``ConnectionError``..."""
    import openai

    if isinstance(err, openai.APIStatusError):
        return f"HTTP {err.status_code}"
    if isinstance(err, openai.APITimeoutError):
        return "Timeout"
    if isinstance(err, openai.APIConnectionError):
        return f"ConnectionError ({type(err.__cause__).__name__})" if err.__cause__ else "ConnectionError"
    return type(err).__name__


class OpenAIReasoner:
    name = "openai"

    def __init__(self, config):
        self.config = config
        self.failures = 0

    @property
    def where(self) -> str:
        return f"{self.config.base_url} (model {self.config.model})"

    def fingerprint(self) -> str:
        public = {
            k: v
            for k, v in asdict(self.config).items()
            if k in ("base_url", "model", "temperature", "max_tokens", "audio_format")
        }
        return fingerprint_of(self.name, public)

    def audio_part(self, path: str) -> dict:
        """The clip as a message content part: OpenAI's ``input_audio`` or vLLM's ``audio_url`` data URL."""
        audio = wav_base64(path)
        if self.config.audio_format == "audio_url":
            return {"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{audio}"}}
        return {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}}

    def payload(self, sample: Sample, records: list[dict] | None) -> dict:
        text = {"type": "text", "text": render(sample.question, sample.choices, records)}
        return {
            "model": self.config.model,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "messages": [{"role": "user", "content": [self.audio_part(sample.audio), text]}],
        }

    async def _one(self, api, semaphore, sample: Sample, records) -> Reply:
        import openai

        from tools.audio import AudioError

        problem = "no attempt"
        async with semaphore:
            try:
                body = self.payload(sample, records)  # built now: at most max_concurrency payloads exist at once
            except AudioError as err:
                return Reply(None, f"audio: {err}")
            for attempt in range(self.config.max_retries + 1):
                try:
                    raw = await api.chat.completions.with_raw_response.create(**body)
                    return Reply(reply_text(json.loads(raw.http_response.text)))
                except openai.APIError as err:  # the SDK already retried what can be retried
                    problem = failure_name(err)
                    break
                except ValueError as err:  # a 200 whose body is not a chat completion (junk, HTML, truncated)
                    problem = f"malformed response: {err}"
                if attempt < self.config.max_retries:
                    log.warning(
                        "openai reasoner: %s for sample %s (attempt %d), retrying", problem, sample.id, attempt + 1
                    )
        self.failures += 1
        log.warning("openai reasoner: giving up on sample %s: %s", sample.id, problem)
        return Reply(None, problem)

    async def _many(self, requests):
        config = self.config
        semaphore = asyncio.Semaphore(config.max_concurrency)
        async with client(config.base_url, config.api_key_env, config.max_retries, config.timeout_s) as api:
            return await asyncio.gather(*(self._one(api, semaphore, s, r) for s, r in requests))

    def answer_many(self, requests: list[tuple[Sample, list[dict] | None]]) -> list[Reply]:
        return list(asyncio.run(self._many(requests)))

"""Any OpenAI-compatible chat endpoint that takes audio (vLLM serving Qwen2-Audio, GPT-4o audio).

Requests run concurrently under a semaphore (``max_concurrency``), each with a timeout, and are
retried a bounded number of times with exponential back-off (honouring ``Retry-After``, capped)
on 408/409/429/5xx, timeouts, dropped connections and malformed JSON.  A request that still fails
is a :class:`~autagent.reasoners.base.Reply` with an ``error``: counted, and never cached as an
answer.  The API key is read from the environment variable ``api_key_env`` and appears in no log,
error message, fingerprint or file.
"""
from __future__ import annotations

import asyncio
import base64
import io
import logging
import os
from dataclasses import asdict

from ..data.sample import Sample
from .base import Reply, fingerprint_of
from .prompts import render

log = logging.getLogger(__name__)
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


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


class OpenAIReasoner:
    name = "openai"

    def __init__(self, config):
        self.config = config
        self.failures = 0
        self.retries = 0

    def fingerprint(self) -> str:
        public = {k: v for k, v in asdict(self.config).items() if k in ("base_url", "model", "temperature", "max_tokens", "audio_format")}
        return fingerprint_of(self.name, public)

    def _headers(self) -> dict:
        key = os.environ.get(self.config.api_key_env, "")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def payload(self, sample: Sample, records: list[dict] | None) -> dict:
        audio = wav_base64(sample.audio)
        if self.config.audio_format == "audio_url":
            audio_part = {"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{audio}"}}
        else:
            audio_part = {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}}
        text = {"type": "text", "text": render(sample.question, sample.choices, records)}
        return {"model": self.config.model, "temperature": self.config.temperature, "max_tokens": self.config.max_tokens,
                "messages": [{"role": "user", "content": [audio_part, text]}]}

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        try:
            wait = float(retry_after) if retry_after else 0.0
        except ValueError:
            wait = 0.0
        return min(max(wait, self.config.backoff_s * 2 ** attempt), self.config.max_backoff_s)

    async def _one(self, client, semaphore, sample: Sample, records) -> Reply:
        import httpx

        from tools.audio import AudioError

        try:
            body = self.payload(sample, records)
        except AudioError as err:
            return Reply(None, f"audio: {err}")
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        problem = "no attempt"
        async with semaphore:
            for attempt in range(self.config.max_retries + 1):
                retry_after = None
                try:
                    response = await client.post(url, json=body, headers=self._headers(), timeout=self.config.timeout_s)
                    if response.status_code == 200:
                        return Reply(reply_text(response.json()))
                    problem = f"HTTP {response.status_code}"
                    if response.status_code not in RETRY_STATUS:
                        break
                    retry_after = response.headers.get("retry-after")
                except (httpx.TimeoutException, httpx.TransportError) as err:
                    problem = type(err).__name__
                except ValueError as err:  # a 200 whose body is not a chat completion (junk, HTML, truncated)
                    problem = f"malformed response: {err}"
                if attempt < self.config.max_retries:
                    self.retries += 1
                    log.warning("openai reasoner: %s for sample %s (attempt %d), retrying", problem, sample.id, attempt + 1)
                    await asyncio.sleep(self._backoff(attempt, retry_after))
        self.failures += 1
        log.warning("openai reasoner: giving up on sample %s: %s", sample.id, problem)
        return Reply(None, problem)

    async def _many(self, requests):
        import httpx

        semaphore = asyncio.Semaphore(self.config.max_concurrency)
        async with httpx.AsyncClient() as client:
            return await asyncio.gather(*(self._one(client, semaphore, s, r) for s, r in requests))

    def answer_many(self, requests: list[tuple[Sample, list[dict] | None]]) -> list[Reply]:
        return list(asyncio.run(self._many(requests)))

"""Any OpenAI-compatible chat endpoint that takes audio (vLLM serving Qwen2-Audio, GPT-4o audio).

Requests run concurrently under a semaphore (``max_concurrency``) with a per-request timeout and
retries with exponential back-off on 429, 5xx, timeouts and dropped connections.  The API key is
read from the environment variable ``api_key_env`` and never logged or stored in a fingerprint.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import logging
import os
from dataclasses import asdict

from ..data.sample import Sample
from .prompts import render

log = logging.getLogger(__name__)
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


def wav_base64(path: str, sample_rate: int = 16000) -> str:
    import soundfile as sf

    from tools.audio import load_audio

    buffer = io.BytesIO()
    sf.write(buffer, load_audio(path, sample_rate, 30.0).samples, sample_rate, format="WAV", subtype="PCM_16")
    return base64.b64encode(buffer.getvalue()).decode()


class OpenAIReasoner:
    name = "openai"

    def __init__(self, config):
        self.config = config
        self.failures = 0

    def fingerprint(self) -> str:
        public = {k: v for k, v in asdict(self.config).items() if k in ("base_url", "model", "temperature", "max_tokens", "audio_format")}
        return f"{self.name}-{hashlib.sha1(json.dumps(public, sort_keys=True).encode()).hexdigest()[:10]}"

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

    async def _one(self, client, semaphore, sample: Sample, records) -> str | None:
        import httpx

        from tools.audio import AudioError

        try:
            body = self.payload(sample, records)
        except AudioError as err:
            log.warning("openai reasoner: %s", err)
            return None
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        async with semaphore:
            for attempt in range(self.config.max_retries + 1):
                try:
                    response = await client.post(url, json=body, headers=self._headers(), timeout=self.config.timeout_s)
                    if response.status_code == 200:
                        return response.json()["choices"][0]["message"]["content"]
                    if response.status_code not in RETRY_STATUS:
                        log.warning("openai reasoner: HTTP %s for sample %s (not retried)", response.status_code, sample.id)
                        break
                except (httpx.TimeoutException, httpx.TransportError) as err:
                    log.warning("openai reasoner: %s for sample %s (attempt %d)", type(err).__name__, sample.id, attempt + 1)
                except (KeyError, IndexError, ValueError):
                    log.warning("openai reasoner: malformed response for sample %s", sample.id)
                    break
                if attempt < self.config.max_retries:
                    await asyncio.sleep(min(0.5 * 2 ** attempt, 8.0))
        self.failures += 1
        return None

    async def _many(self, requests):
        import httpx

        semaphore = asyncio.Semaphore(self.config.max_concurrency)
        async with httpx.AsyncClient() as client:
            return await asyncio.gather(*(self._one(client, semaphore, s, r) for s, r in requests))

    def answer_many(self, requests: list[tuple[Sample, list[dict] | None]]) -> list[str | None]:
        return list(asyncio.run(self._many(requests)))

    def answer(self, sample: Sample, records: list[dict] | None) -> str | None:
        return self.answer_many([(sample, records)])[0]

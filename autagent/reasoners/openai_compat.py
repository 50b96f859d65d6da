"""Any OpenAI-compatible endpoint: an audio chat model (vLLM serving Qwen2-Audio, GPT-4o audio), or a
text model that knows the clip only through the tool records (``audio: drop``: the cascade over HTTP,
its choices scored from prompt log-probabilities with ``scoring: logprobs``, :mod:`.served_scoring`).

The client is the ``openai`` SDK's :class:`~openai.AsyncOpenAI`: its bounded retries with
exponential back-off on 408/409/429/5xx, timeouts and dropped connections, honouring
``Retry-After``, and its per-request timeout.  On top of it, a 200 whose body is not a chat
completion (junk, HTML, a truncated body) is retried the same number of times, which the SDK does
not do.  Requests run concurrently under a semaphore (``max_concurrency``), and a request's payload
(the clip as base64 WAV) is built only once it holds the semaphore, so at most that many exist at
once.  A request that still fails, or whose reply is malformed, is a
:class:`~autagent.reasoners.base.Reply` with an ``error`` for that item alone: counted, and never
cached as an answer; every other item's reply is given to ``on_reply`` as it arrives (the answer cache
keeps it then: a run stopped mid-batch has paid for nothing it must ask again).  The API key is read
from the environment variable ``api_key_env`` and appears in no log, error message, fingerprint or
file.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
from dataclasses import asdict, dataclass

from tools.audio import AudioError

from ..data.sample import Sample
from .base import Reply, fingerprint_of
from .cascade import LAYOUT_VERSION, CascadeReasonerConfig
from .cascade.layout import record_lines
from .openai_http import client, failure_name
from .prompts import format_choices, render
from .served_scoring import NoPromptLogprobs, ServedScorer

log = logging.getLogger(__name__)


AUDIO_MODES = ("send", "drop")
SCORINGS = ("text", "logprobs")
DROPPED = (
    "{records}Question: {question}\nChoices:\n{choices}\nAnswer with the exact text of one choice and nothing else."
)
"""What a text model is asked with ``audio: drop`` and ``scoring: text``: the cascade's record lines and
question, and the choices to answer with."""


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
    audio: str = "send"
    """send: the clip goes with the question (an audio model); drop: the model gets the tool records and the
    question as text, in the cascade's layout (a text-only model: the cascaded voice agent)."""
    scoring: str = "text"
    """text: the model's generated reply is the answer; logprobs (with audio: drop): each choice scored as the
    in-process cascade scores it (calibrated log-likelihood, laid out by reasoner.cascade's settings), from
    /v1/completions' echoed prompt log-probabilities and the server's /tokenize (vLLM); a server without them
    is told apart at the first request and answered with text, and the reasoner's ``where`` says which."""
    sample_rate: int = 16000
    """Clips are sent at this rate (Hz), the rate the served audio model reads (Qwen2-Audio's 16 kHz): vLLM's
    CPU build cannot resample a clip itself (no torchaudio for its torch), and a smaller clip travels faster."""
    prompts_per_request: int = 16
    """With scoring: logprobs: prompts (one per choice) sent in one /v1/completions request (each within
    timeout_s: a CPU vLLM scores about 200 prompt tokens a second on a busy core, every token's full
    log-softmax included)."""

    def __post_init__(self):
        if self.audio_format not in ("input_audio", "audio_url"):
            raise ValueError(
                f"reasoner.openai.audio_format must be input_audio or audio_url, got {self.audio_format!r}"
            )
        if self.audio not in AUDIO_MODES or self.scoring not in SCORINGS:
            raise ValueError(
                f"reasoner.openai.audio must be one of {list(AUDIO_MODES)} and reasoner.openai.scoring one of "
                f"{list(SCORINGS)}, got {self.audio!r} and {self.scoring!r}"
            )
        if self.scoring == "logprobs" and self.audio != "drop":
            raise ValueError(
                "reasoner.openai.scoring: logprobs scores text prompts (/v1/completions takes no audio): set "
                "reasoner.openai.audio: drop"
            )
        if not 8000 <= self.sample_rate <= 48000 or self.prompts_per_request < 1:
            raise ValueError("reasoner.openai: sample_rate in [8000, 48000] Hz and prompts_per_request >= 1")
        if self.max_retries < 0 or self.timeout_s <= 0 or self.max_concurrency < 1:
            raise ValueError("reasoner.openai: max_retries >= 0, timeout_s > 0 and max_concurrency >= 1")


def wav_base64(path: str, sample_rate: int = 16000) -> str:
    import soundfile as sf

    # looked up when called, not at import: a test patches it on its module
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
        texts = [p.get("text", "") for p in content if isinstance(p, dict)]
        if not all(isinstance(text, str) for text in texts):
            raise ValueError("a text part of the message is not text")
        content = " ".join(texts)
    if content is not None and not isinstance(content, str):
        raise ValueError(f"message content is {type(content).__name__}")
    return content.strip() if content and content.strip() else None


class OpenAIReasoner:
    name = "openai"

    def __init__(self, config, layout=None):
        """``layout``: the cascade's settings (:class:`~.cascade.CascadeReasonerConfig`) that ``audio: drop``
        lays the records out by, and ``scoring: logprobs`` scores by."""
        self.config, self.layout = config, layout or CascadeReasonerConfig()
        self.failures = 0
        self.scored = None
        if config.scoring == "logprobs":
            root = config.base_url.rstrip("/").removesuffix("/v1")
            self.scored = ServedScorer(root, config.model, self.layout, config.prompts_per_request)
        self.scoring_used: str | None = None if self.scored is not None else "text"
        """logprobs or text once known (the first request to the server tells)."""
        self.fingerprinted_as: str | None = None
        self.fallback: str | None = None
        """Why a server asked for logprobs answers with text."""

    @property
    def where(self) -> str:
        c = self.config
        scoring = self.scoring_used or f"{c.scoring} (not asked yet)"
        because = f": {self.fallback}" if self.fallback else ""
        return f"{c.base_url} (model {c.model}, audio {c.audio}, scoring {scoring}{because})"

    def fingerprint(self) -> str:
        c = self.config
        public = {
            k: v
            for k, v in asdict(c).items()
            if k in ("base_url", "model", "temperature", "max_tokens", "audio_format")
        }
        if c.audio == "send" and c.sample_rate != 16000:  # the defaults keep the answers cached before they existed
            public["sample_rate"] = c.sample_rate
        if c.audio == "drop":
            public.update(audio="drop", max_items=self.layout.max_items)
        if self.scored is not None and self.scoring_used is None:
            asyncio.run(self._with_client(self._probe))
        self.fingerprinted_as = self.scoring_used or c.scoring
        if self.fingerprinted_as == "logprobs":
            layout = ("max_prompt_tokens", "calibrate", "neutral_prompt", "max_new_tokens")
            public.update(scoring="logprobs", layout=LAYOUT_VERSION, **{k: getattr(self.layout, k) for k in layout})
        return fingerprint_of(self.name, public)

    async def _with_client(self, work, *args):
        c = self.config
        async with client(c.base_url, c.api_key_env, c.max_retries, c.timeout_s) as api:
            return await work(api, *args)

    async def _probe(self, api) -> None:
        """Whether the server scores choices (``scoring_used``); a server that cannot be reached leaves it
        undecided (the next request asks again)."""
        import openai

        try:
            await self.scored.probe(api)
            self.scoring_used = "logprobs"
        except NoPromptLogprobs as err:
            self.scoring_used, self.fallback = "text", str(err)
            log.warning("openai reasoner: %s: scoring choices by the generated text instead", err)
        except openai.APIError as err:
            log.warning("openai reasoner: cannot ask %s whether it scores choices: %s", self.config.base_url, err)

    def audio_part(self, path: str) -> dict:
        """The clip as a message content part: OpenAI's ``input_audio`` or vLLM's ``audio_url`` data URL."""
        audio = wav_base64(path, self.config.sample_rate)
        if self.config.audio_format == "audio_url":
            return {"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{audio}"}}
        return {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}}

    def payload(self, sample: Sample, records: list[dict] | None) -> dict:
        if self.config.audio == "drop":
            content = dropped_text(sample, records, self.layout.max_items)
        else:
            text = {"type": "text", "text": render(sample.question, sample.choices, records)}
            content = [self.audio_part(sample.audio), text]
        return {
            "model": self.config.model,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "messages": [{"role": "user", "content": content}],
        }

    async def _one(self, api, semaphore, sample: Sample, records) -> Reply:
        import openai

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
                except (ValueError, TypeError, AttributeError) as err:  # a 200 that is no chat completion
                    problem = f"malformed response: {err}"
                if attempt < self.config.max_retries:
                    log.warning(
                        "openai reasoner: %s for sample %s (attempt %d), retrying", problem, sample.id, attempt + 1
                    )
        log.warning("openai reasoner: giving up on sample %s: %s", sample.id, problem)
        return Reply(None, problem)

    async def _many(self, api, requests, on_reply=None):
        semaphore = asyncio.Semaphore(self.config.max_concurrency)
        if self.scored is not None and self.scoring_used is None:
            await self._probe(api)
        if self.fingerprinted_as is not None and self.scoring_used not in (None, self.fingerprinted_as):
            # answers of the other kind must not go to the cache named for this one: a new run decides afresh
            problem = f"the server changed its answer to whether it scores choices ({self.where}): start again"
            return [Reply(None, problem)] * len(requests)
        if self.scoring_used == "logprobs":
            return await self.scored.answer_many(api, semaphore, requests, on_reply)

        async def one(i, sample, records):
            reply = await self._one(api, semaphore, sample, records)
            if on_reply is not None:
                on_reply(i, reply)
            return reply

        return await asyncio.gather(*(one(i, s, r) for i, (s, r) in enumerate(requests)))

    streams_replies = True
    """:meth:`answer_many` gives each reply to ``on_reply`` as it arrives (the answer cache keeps it then)."""

    def answer_many(self, requests: list[tuple[Sample, list[dict] | None]], on_reply=None) -> list[Reply]:
        """One reply per request; ``on_reply(index, reply)`` is called as each arrives."""
        replies = list(asyncio.run(self._with_client(self._many, requests, on_reply)))
        self.failures += sum(r.error is not None for r in replies)
        return replies


def dropped_text(sample: Sample, records: list[dict] | None, max_items: int) -> str:
    """What a text model reads for ``sample`` with ``audio: drop``: the records one per line in the
    cascade's notation (:func:`.cascade.layout.record_lines`), the question and the choices."""
    lines = "".join(line for _, line in record_lines(records, max_items))
    if not sample.choices:
        return f"{lines}Question: {sample.question.strip()}\nAnswer:"
    return DROPPED.format(records=lines, question=sample.question.strip(), choices=format_choices(sample.choices))

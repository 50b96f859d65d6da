"""Any OpenAI-compatible endpoint: an audio chat model (vLLM serving Qwen2-Audio, GPT-4o audio), or a
text model that knows the clip only through the tool records (``audio: drop``: the cascade over HTTP,
its choices scored from prompt log-probabilities with ``scoring: logprobs``, :mod:`.served_scoring`).

The client is the ``openai`` SDK's :class:`~openai.AsyncOpenAI`; retries and timeouts are the
:class:`~.pacing.Pacer`'s: it sizes each request's timeout, and how many requests are in flight (and
how many prompts each carries), by the server's measured speed, sends a timed-out request again only
once the server is done with what it was given, and retries what the SDK would (408/409/429/5xx,
dropped connections, with back-off and ``Retry-After``) and a 200 whose body is not a chat completion
(junk, HTML, a truncated body), ``max_retries`` times (``pacing``; its summary is in ``where``).  A
request's payload (the clip as base64 WAV) is built only once it is sent, so at most as many exist as
requests are in flight.  A request that still fails, or whose reply is malformed, is a
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

from tools.audio import AudioError, load_audio

from ..data.sample import Sample
from .base import Reply, fingerprint_of
from .cascade import LAYOUT_VERSION, CascadeReasonerConfig
from .cascade.layout import record_lines
from .openai_http import client, failure_name  # noqa: F401 - failure_name: tool_loop imports it from here
from .pacing import Pacer, Retry, Unanswered
from .prompts import format_choices, render
from .served_scoring import NoPromptLogprobs, ServedScorer

log = logging.getLogger(__name__)


AUDIO_MODES = ("send", "drop")
PACINGS = ("adaptive", "fixed")
AUDIO_TOKENS = 750
"""What a clip costs a served audio model, as the pacer counts it: Qwen2-Audio's 25 tokens a second for
the 30 s a clip is cut at (an upper bound: a request is never given too little time for it)."""
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
    """The most requests in flight at once (pacing adaptive: it starts at one and grows while the server
    keeps up, and halves when a request is slow or times out)."""
    timeout_s: float = 60.0
    """A request's timeout before the server's speed is known, and the least it ever gets; pacing adaptive:
    then three times what the prompt tokens in flight take at the speed measured (up to max_timeout_s), and
    a request answered after more than half of it is slow (fewer at once)."""
    max_timeout_s: float = 600.0
    """The most a request is given however many tokens it carries (pacing adaptive): a server that answers
    nothing in this time is stuck."""
    pacing: str = "adaptive"
    """adaptive: requests at once, prompts a request and timeouts follow the server's measured speed
    (autagent/reasoners/pacing.py); fixed: max_concurrency requests of prompts_per_request prompts, each
    within timeout_s (a server whose capacity is known, a paid API's rate limit). Either way a timed-out
    request is sent again only once the server is done with what it was given."""
    max_retries: int = 3
    """Retries per request (a timeout once the server is done with it; 408, 409, 429, 5xx, a dropped
    connection after a back-off, Retry-After where given; a 200 that is no completion); then an error."""
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
    """With scoring: logprobs: the most prompts (one per choice) sent in one /v1/completions request (pacing
    adaptive: fewer where the server is measured slow: a CPU vLLM scores a few hundred prompt tokens a
    second, every token's full log-softmax included)."""

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
        if self.pacing not in PACINGS:
            raise ValueError(f"reasoner.openai.pacing must be one of {list(PACINGS)}, got {self.pacing!r}")
        if not self.max_timeout_s >= self.timeout_s:
            raise ValueError(
                f"reasoner.openai.max_timeout_s ({self.max_timeout_s:g}) must be at least timeout_s "
                f"({self.timeout_s:g})"
            )

    def pacer(self) -> Pacer:
        """The pacing these settings ask for (one per reasoner: what it measures carries over)."""
        return Pacer(
            self.max_concurrency,
            self.prompts_per_request,
            self.timeout_s,
            self.max_timeout_s,
            self.max_retries,
            self.pacing == "adaptive",
        )


def wav_base64(path: str, sample_rate: int = 16000) -> str:
    import soundfile as sf

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
        self.pacer = config.pacer()
        self.says_idle: bool | None = None
        """Whether the server says when it is idle (vLLM's /metrics): a pacer drains by it after a timeout."""
        if config.scoring == "logprobs":
            root = config.base_url.rstrip("/").removesuffix("/v1")
            self.scored = ServedScorer(root, config.model, self.layout)
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
        return f"{c.base_url} (model {c.model}, audio {c.audio}, scoring {scoring}{because}; {self.pacer.summary()})"

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
        # the pacer retries (the SDK's would run inside one request's timeout) and times each request: the
        # SDK's own timeout is the ceiling
        async with client(c.base_url, c.api_key_env, 0, max(c.timeout_s, c.max_timeout_s)) as api:
            self.pacer.idle = (lambda: self._idle(api)) if self.says_idle is not False else None
            try:
                return await work(api, *args)
            finally:
                self.pacer.idle = None

    async def _idle(self, api) -> bool | None:
        """Whether the server has no request running or waiting, from vLLM's ``/metrics`` (its gauges
        ``vllm:num_requests_running`` and ``_waiting``); None where it does not say (then never asked again)."""
        import openai

        url = self.config.base_url.rstrip("/").removesuffix("/v1") + "/metrics"
        try:
            text = await api.get(url, cast_to=str, options={"timeout": self.config.timeout_s, "max_retries": 0})
            busy = [
                float(line.rsplit(" ", 1)[1])
                for line in str(text).splitlines()
                if line.split("{")[0].split(" ")[0] in ("vllm:num_requests_running", "vllm:num_requests_waiting")
            ]
        except (openai.APIError, ValueError, IndexError):
            busy = []
        self.says_idle = bool(busy)
        return (sum(busy) == 0) if busy else None

    async def _probe(self, api) -> str | None:
        """Whether the server scores choices (``scoring_used``); a server that cannot be reached leaves it
        undecided (the next request asks again): then why, else None."""
        try:
            await self.scored.probe(api, self.pacer)
            self.scoring_used = "logprobs"
        except NoPromptLogprobs as err:
            self.scoring_used, self.fallback = "text", str(err)
            log.warning("openai reasoner: %s: scoring choices by the generated text instead", err)
        except Unanswered as err:
            log.warning("openai reasoner: cannot ask %s whether it scores choices: %s", self.config.base_url, err)
            return str(err)
        return None

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

    def cost(self, sample: Sample, records) -> int:
        """The prompt tokens a chat request puts before the server, as the pacer counts them: its text at
        four characters a token, :data:`AUDIO_TOKENS` for a clip, and the reply's tokens."""
        if self.config.audio == "drop":
            text = dropped_text(sample, records, self.layout.max_items)
        else:
            text = render(sample.question, sample.choices, records)
        return len(text) // 4 + (AUDIO_TOKENS if self.config.audio == "send" else 0) + self.config.max_tokens

    async def _one(self, api, timeout: float, sample: Sample, records) -> Reply:
        """One attempt at a chat request (``timeout``: the pacer's for it); :class:`~.pacing.Retry` for a
        200 that is no chat completion."""
        try:
            body = self.payload(sample, records)  # built now: at most as many payloads as requests in flight
        except AudioError as err:
            return Reply(None, f"audio: {err}")
        raw = await api.chat.completions.with_raw_response.create(**body)
        try:
            return Reply(reply_text(json.loads(raw.http_response.text)))
        except (ValueError, TypeError, AttributeError) as err:  # a 200 that is no chat completion
            log.warning("openai reasoner: malformed response for sample %s: %s", sample.id, err)
            raise Retry(f"malformed response: {err}") from None

    async def _many(self, api, requests, on_reply=None):
        if self.scored is not None and self.scoring_used is None:
            problem = await self._probe(api)
            if problem is not None:  # undecided: no answer of either kind (the cache is named for one)
                return [Reply(None, f"cannot ask the server whether it scores choices: {problem}")] * len(requests)
        if self.fingerprinted_as is not None and self.scoring_used not in (None, self.fingerprinted_as):
            # answers of the other kind must not go to the cache named for this one: a new run decides afresh
            problem = f"the server changed its answer to whether it scores choices ({self.where}): start again"
            return [Reply(None, problem)] * len(requests)
        if self.scoring_used == "logprobs":
            return await self.scored.answer_many(api, self.pacer, requests, on_reply)
        replies: list[Reply | None] = [None] * len(requests)

        def give(i: int, reply: Reply) -> None:
            if reply.error is not None:
                log.warning("openai reasoner: giving up on sample %s: %s", requests[i][0].id, reply.error)
            replies[i] = reply
            if on_reply is not None:
                on_reply(i, reply)

        async def send(units, timeout):
            (i,) = units
            give(i, await self._one(api, timeout, *requests[i]))

        costs = [self.cost(sample, records) for sample, records in requests]

        def fail(units, problem):
            for unit in units:
                give(unit, Reply(None, problem))

        await self.pacer.run(costs, send, fail, grouped=False)
        return replies

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

"""What answers behind ``autagent serve``: any OpenAI-compatible server (through the ``openai`` SDK's
client: bounded retries honouring ``Retry-After``, timeouts), or one of our reasoners in process.

Both take a chat-completions request (the service's :class:`.chat_call.ChatCall`, or a body as a dict)
and give back the completion as JSON, or its server-sent events."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path

from tools.audio import without_paths

from ..data.sample import Sample
from ..reasoners.json_limits import loads
from ..reasoners.messages import BadRequest, read_query, with_choices
from ..reasoners.openai_http import MAX_REPLY_BYTES, client, failure_name
from .chat_call import ChatCall
from .protocol import split_for_sdk
from .upstream_audio import AudioPolicy, Converted, has_audio, upstream_messages

MAX_UPSTREAM_MESSAGE = 500
"""The characters of an upstream's own refusal a client is shown (after its paths are taken out)."""


class UpstreamError(RuntimeError):
    """The upstream could not answer (down, timed out, junk): a 502 that names no address; ``status``
    is the upstream's own 4xx status when it refused the request itself (never 401 or 403: the
    service's own credentials are not the client's fault, a 502)."""

    def __init__(self, message: str, status: int | None = None, body=None):
        super().__init__(message)
        self.status, self.body = status, body


class OpenAIUpstream:
    audio_policy = AudioPolicy()
    """What every clip of every message passes before it goes upstream (the service's: ``build`` sets it)."""

    def __init__(
        self,
        base_url: str,
        api_key_env: str,
        model: str | None,
        timeout_s: float,
        max_retries: int,
        audio: str = "send",
        sample_rate: int = 0,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ):
        self.base_url, self.model = base_url.rstrip("/"), model
        self.audio, self.sample_rate = audio, sample_rate
        """The clips sent (at ``sample_rate``, 0: as they came) or dropped (:mod:`.upstream_audio`)."""
        self.client = client(base_url, api_key_env, max_retries, timeout_s, max_reply_bytes)
        self.converted = Converted()
        """The request clips as they were sent on, by content (a conversation sends its clip every turn)."""

    @property
    def name(self) -> str:
        return self.base_url

    @property
    def needs_model(self) -> bool:
        """A request must name its model (no ``--model`` to send instead)."""
        return self.model is None

    def _body(self, body: dict) -> dict:
        """The SDK's arguments: the request as it came, its ``choices`` field (ours, not an OpenAI
        parameter) written into the last user message's text as the README's first form has them (one
        per line after the question, unless the text lists them already: an upstream model sees the
        choices it answers from, issue 63), with the model name overridden when the service was told
        one, and the fields the SDK does not take (vLLM's ``top_k``...) in ``extra_body``."""
        if body.get("choices") and isinstance(body.get("messages"), list):
            body = {**body, "messages": with_choices(body["messages"], body["choices"])}
        payload, extra = split_for_sdk({**body, "model": self.model} if self.model else body)
        return {**payload, "extra_body": extra} if extra else payload

    async def _payload(self, request: ChatCall | dict) -> dict:
        """The SDK's arguments (:meth:`_body`) less ``stream``, the clips as the upstream takes them (in a
        worker thread: decoding and resampling a clip is not for the event loop); the clip the service
        read already is re-encoded from its stored file (:func:`.upstream_audio.for_upstream`)."""
        call = request if isinstance(request, ChatCall) else ChatCall(request)
        payload = {k: v for k, v in self._body(call.sent).items() if k != "stream"}
        messages = payload.get("messages")
        if isinstance(messages, list) and has_audio(messages):  # every clip of every message: one policy
            payload["messages"] = await upstream_messages(
                messages, self.audio, self.sample_rate, self.audio_policy, call.clip, self.converted
            )
        return payload

    def _error(self, err: Exception) -> UpstreamError:
        import openai

        if isinstance(err, openai.APIStatusError) and err.status_code in (401, 403, 407):
            return UpstreamError(f"the upstream refused the service's credentials (HTTP {err.status_code})")
        if isinstance(err, openai.APIStatusError) and 400 <= err.status_code < 500 and err.status_code != 429:
            said = upstream_message(getattr(err, "body", None))
            return UpstreamError(
                f"the upstream refused the request: HTTP {err.status_code}" + (f": {said}" if said else ""),
                err.status_code,
                getattr(err, "body", None),
            )
        return UpstreamError(f"the upstream failed: {failure_name(err, url=False)}")

    async def complete(self, request: ChatCall | dict) -> dict:
        import openai

        payload = await self._payload(request)
        try:
            raw = await self.client.chat.completions.with_raw_response.create(**payload)
            reply = strict_json(raw.http_response.content)
        except openai.APIError as err:
            raise self._error(err) from None
        except ValueError:
            raise UpstreamError("the upstream's reply is not JSON") from None
        if not isinstance(reply, dict) or not isinstance(reply.get("choices"), list) or not reply["choices"]:
            raise UpstreamError("the upstream's reply is not a chat completion (no choices)")
        return reply

    async def stream(self, request: ChatCall | dict):
        """The upstream's server-sent event lines, as they come (the connection is opened before the
        first line is yielded, so a refusal is an error, not a broken stream)."""
        import openai

        payload = await self._payload(request)
        manager = self.client.chat.completions.with_streaming_response.create(**payload, stream=True)
        try:
            response = await manager.__aenter__()
        except openai.APIError as err:
            raise self._error(err) from None
        if not response.http_response.headers.get("content-type", "").startswith("text/event-stream"):
            await manager.__aexit__(None, None, None)  # its lines are no stream's: never passed on as one
            raise UpstreamError("the upstream's reply to a streamed request is not an event stream")

        async def lines():
            try:
                async for line in response.http_response.aiter_lines():
                    yield line + "\n"
            finally:
                await manager.__aexit__(None, None, None)

        return lines()

    async def close(self) -> None:
        await self.client.close()


def strict_json(raw: bytes):
    """The reply's JSON (:func:`loads`, its nesting bounded); ``NaN`` or ``Infinity`` in it is not JSON (a
    ValueError: the reply could not be passed on as JSON, a 502, not a 500)."""
    if b"NaN" not in raw and b"Infinity" not in raw:
        return loads(raw)

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    json.loads(raw, parse_constant=refuse)  # in a string they are text, and pass
    return loads(raw)


def upstream_message(body) -> str:
    """An upstream's own account of a refusal (OpenAI's ``{"error": {"message"}}``, FastAPI's
    ``{"detail"}`` or plain text) on one line, at most :data:`MAX_UPSTREAM_MESSAGE` characters, with
    no paths (its folders and ours are not the client's business); "" when it gave none."""
    said = body
    if isinstance(said, dict):
        said = said.get("error", said.get("detail", said.get("message")))
        said = said.get("message", said.get("detail")) if isinstance(said, dict) else said
    if said is None or said == "":
        return ""
    text = " ".join((said if isinstance(said, str) else json.dumps(said, default=str)).split())
    text = without_paths(text[: 4 * MAX_UPSTREAM_MESSAGE])
    return text if len(text) <= MAX_UPSTREAM_MESSAGE else text[: MAX_UPSTREAM_MESSAGE - 3] + "..."


class LocalReasoner:
    """One of our reasoners (``embedded``, ``qwen2-audio``) behind the OpenAI chat API: the clip, the
    question and the choices are read from the request, and so are tool records a plugin service in
    front of it added; the reply is the reasoner's answer as a chat completion."""

    def __init__(self, reasoner, kind: str, audio_dir: Path, max_audio_bytes: int, store=None):
        self.reasoner, self.kind = reasoner, kind
        self.audio_dir, self.max_audio_bytes = Path(audio_dir), max_audio_bytes
        self.store = store  # the service's bounded clips folder: the clip is held while it is answered
        self.lock = threading.Lock()  # the reasoner and its answer cache are not thread-safe

    @property
    def name(self) -> str:
        return f"{self.kind} (in process)"

    def _answer(self, request: ChatCall | dict) -> str:
        call = request if isinstance(request, ChatCall) else ChatCall(request)
        store, body, clip = self.store, call.sent, call.clip
        hold = (lambda raw, fmt: store.hold(raw, fmt, self.max_audio_bytes)) if store is not None else None

        def known(data: str, fmt: str):  # the clip the service read: held again, not decoded again
            if clip is not None and clip.sent_as(data, fmt, None) and (store is None or store.retake(clip.path)):
                return clip.path, clip.size
            return None

        messages, choices = body.get("messages"), body.get("choices")
        query = read_query(messages, choices, self.audio_dir, self.max_audio_bytes, hold, known)
        if query.remote:
            raise BadRequest("the reasoner in process takes the clip as input_audio or a data: URL")
        refused = len(query.choices) < 2
        try:
            if refused:
                raise BadRequest("the reasoner answers multiple-choice questions: give at least two choices")
            sample = Sample(
                id="request", audio=query.audio, question=query.question, choices=query.choices, answer=query.choices[0]
            )
            with self.lock:
                (reply,) = self.reasoner.ask([(sample, query.records)])
        finally:
            if store is not None:
                store.release(query.audio, drop=refused)  # a refused clip is not kept
        if reply.error:  # its clip's path (and any other) is not the client's business
            raise UpstreamError(f"reasoner {self.name}: {without_paths(reply.error, query.audio)}")
        return reply.text or ""

    def hearing(self):
        """The reasoner on a clip as it arrives (:class:`ReasonerEar`), when it is the embedded one.  None
        otherwise: another reasoner hears the clip when it is sent."""
        inner = getattr(self.reasoner, "inner", None)
        return ReasonerEar(inner) if hasattr(inner, "listener") and hasattr(inner, "facts") else None

    async def complete(self, request: ChatCall | dict) -> dict:
        call = request if isinstance(request, ChatCall) else ChatCall(request)
        body = call.body
        text = await asyncio.to_thread(self._answer, call)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.kind,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    async def stream(self, request: ChatCall | dict):
        done = await self.complete(request)

        async def lines():
            base = {k: done[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
            text = done["choices"][0]["message"]["content"]
            for delta, finish in (
                ({"role": "assistant", "content": ""}, None),
                ({"content": text}, None),
                ({}, "stop"),
            ):
                chunk = base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return lines()

    async def close(self) -> None:
        await asyncio.to_thread(self.reasoner.close)


class ReasonerEar:
    """The embedded reasoner on a clip as it arrives, as a realtime audio model takes it in: it hears the
    clip as it comes (:class:`autagent.reasoners.hearing.HearingStream`; at the end, the whole clip's
    facts) and starts reading the tools' provisional records and what it has heard so far, so that when
    the clip ends its answer costs the reading of what changed.  Its answers are the whole clip's."""

    rate = 16000

    def __init__(self, reasoner):
        self.reasoner, self.hearing = reasoner, reasoner.listener.stream()

    def feed(self, samples) -> None:
        self.hearing.feed(samples)

    def peek(self, records: list[dict]) -> None:
        for record in records:
            self.reasoner.facts(record)
        self.reasoner.text.encode([fact.text for fact in self.hearing.peek()])

    def finish(self, samples, path: str) -> None:
        self.hearing.finish(samples, path)

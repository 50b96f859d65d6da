"""The HTTP service (FastAPI): an OpenAI-compatible ``/v1/chat/completions`` with a plugin in front of
any upstream, ``/v1/select``, ``/health`` and Prometheus ``/metrics``.

Every refused request gets an OpenAI-shaped JSON error and the service stays up: 400 for a request
it cannot read (no audio, audio it cannot decode, too big or too long, a ``file:`` URL or a path,
remote audio unless allowed, bad JSON or messages, an unknown field or one of the wrong type), 413 for
a body over the limit, 429 with ``Retry-After`` once ``max_concurrency`` requests run and
``max_queue`` wait (decided before the body is read), 502 naming the upstream when it is down or
answers junk.  A tool that fails drops only its record (named in the reply's ``autagent`` field).
Decoding, hashing and storing the clip, selection, tools and a reasoner in process run in worker
threads (as many as ``max_concurrency`` allows, no lock shared between requests), so ``/health``
always answers; a streamed answer keeps its slot until its last line and ends with an error event
when the upstream fails mid-way.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from .agentic import AgenticChat
from .limits import AudioStore, Refused, body_limit, clip_seconds, read_json

STAGES = ("select", "tools", "upstream", "total")


@dataclass
class ServeOptions:
    """What ``autagent serve`` was started with (its flags)."""

    upstream: object
    """An :class:`~.upstream.OpenAIUpstream` or :class:`~.upstream.LocalReasoner`."""
    plugin: object | None = None
    """A :class:`autagent.api.Plugin` applied in front of the upstream, or None (pass-through)."""
    max_concurrency: int = 8
    """Requests handled at once."""
    max_queue: int = 32
    """Requests waiting beyond those; more get a 429."""
    max_audio_bytes: int = 25 << 20
    """Largest clip accepted."""
    max_audio_seconds: float = 30.0
    """Longest clip accepted.  The tools hear at most ``tools.max_seconds`` (30 s by default): the
    default refuses anything longer; a larger value accepts longer clips, and the reply's ``autagent``
    field then says how much the tools heard (``tools_heard_s``)."""
    tools_max_seconds: float = 30.0
    """How much of a clip the tools hear (the run config's ``tools.max_seconds``)."""
    allow_remote_audio: bool = False
    """Fetch ``http(s)`` audio URLs (refused otherwise)."""
    allow_private_audio_hosts: bool = False
    """Let remote audio (and its redirects) come from private, loopback or link-local addresses."""
    audio_dir: str = ".cache/serve-audio"
    """Where clips are kept, named by their content."""
    audio_cache_bytes: int = 2 << 30
    """The clips folder is kept under this size, least recently used first (clips in use are kept)."""
    request_log: str | None = None
    """Append one JSON line per chat request received: its time, model and the text of its last user
    message (never the audio, never a header)."""
    agentic: bool = False
    """The upstream may ask for the tools the plugin did not select, as function tools (:mod:`.agentic`)."""
    max_tool_rounds: int = 3
    """With ``agentic``: rounds of tool calls at most per request."""
    tools: object | None = None
    """With ``agentic`` and no plugin: the :class:`tools.pool.ToolPool` whose tools are offered."""
    extra_workers: int = 4
    """Worker threads beyond ``max_concurrency`` and the realtime sessions (the rest of the service's work)."""
    max_realtime_sessions: int = 8
    """``/v1/realtime`` sessions at once (each holds at most ``max_audio_seconds`` of audio); more are
    told so and closed."""
    realtime_idle_s: float = 300.0
    """A realtime session that sends nothing for this long is closed."""
    audio_store: object | None = None
    """The :class:`~.limits.AudioStore` shared with a reasoner in process (made from ``audio_dir`` if None)."""


def error_body(message: str, kind: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class Metrics:
    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter(
            "autagent_requests", "Requests by endpoint and status", ["endpoint", "status"], registry=self.registry
        )
        self.errors = Counter(
            "autagent_request_errors", "Refused or failed requests by kind", ["kind"], registry=self.registry
        )
        self.stage = Histogram(
            "autagent_stage_seconds",
            "Seconds per stage of a request",
            ["stage"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.tool_errors = Counter("autagent_tool_errors", "Tool records that failed", ["tool"], registry=self.registry)
        self.upstream_errors = Counter("autagent_upstream_errors", "Upstream calls that failed", registry=self.registry)
        self.in_flight = Gauge("autagent_in_flight", "Requests being handled or waiting", registry=self.registry)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def create_app(options: ServeOptions):
    from ..reasoners.chat import BadRequest

    app = FastAPI(title="AuTAgent", description="A trained tool-selection plugin in front of an audio model.")
    metrics = Metrics()
    slots = asyncio.Semaphore(options.max_concurrency)
    admitted = {"count": 0}
    plugin = options.plugin
    agentic = AgenticChat(options) if options.agentic else None
    store = options.audio_store = options.audio_store or AudioStore(options.audio_dir, options.audio_cache_bytes)
    max_body = body_limit(options.max_audio_bytes)

    def refuse(err: Refused, endpoint: str) -> JSONResponse:
        metrics.requests.labels(endpoint, str(err.status)).inc()
        metrics.errors.labels(err.kind).inc()
        return JSONResponse(error_body(str(err), err.kind), status_code=err.status, headers=err.headers)

    async def read_body(request: Request) -> dict:
        return await read_json(request, max_body)

    async def query_of(body: dict):
        """The request's clip (fetched if remote and allowed, checked for size and length), question
        and choices; decoding, hashing and writing it run in a worker thread."""
        from tools.audio import AudioError

        from ..reasoners.chat import read_query, store_audio
        from .remote import fetch

        folder = Path(options.audio_dir)
        query = await asyncio.to_thread(
            read_query, body.get("messages"), body.get("choices"), folder, options.max_audio_bytes
        )
        if query.remote:
            if not options.allow_remote_audio:
                raise BadRequest("remote audio URLs are refused (start the service with --allow-remote-audio)")
            raw = await fetch(query.remote["url"], options.max_audio_bytes, options.allow_private_audio_hosts)
            fmt = Path(query.remote["url"]).suffix.lstrip(".") or "wav"
            query.audio = str(await asyncio.to_thread(store_audio, raw, fmt, folder, options.max_audio_bytes))
        try:
            seconds = await asyncio.to_thread(clip_seconds, query.audio, options.max_audio_seconds)
        except AudioError as err:
            raise BadRequest(f"the audio cannot be used: {str(err).split(': ', 1)[-1]}") from None
        if seconds > options.max_audio_seconds:
            hint = " (the tools hear at most that)" if options.max_audio_seconds == options.tools_max_seconds else ""
            raise BadRequest(f"the audio is longer than {options.max_audio_seconds:g} s{hint}")
        query.seconds = seconds
        return query

    async def admitted_call(handler, endpoint: str):
        """``handler()`` once admitted (a 429 before anything is read when the service is full) and
        holding a slot; a streamed reply (:func:`held`) keeps the slot until its last line."""
        if admitted["count"] >= options.max_concurrency + options.max_queue:
            return refuse(
                Refused(429, "too many requests: try again shortly", "rate_limit_error", {"Retry-After": "1"}), endpoint
            )
        admitted["count"] += 1
        metrics.in_flight.inc()
        released = False

        def release():
            nonlocal released
            if not released:
                released = True
                slots.release()
                admitted["count"] -= 1
                metrics.in_flight.dec()

        try:
            await slots.acquire()
        except BaseException:
            admitted["count"] -= 1
            metrics.in_flight.dec()
            raise
        response = None
        try:
            response = await handler()
            return response
        except Refused as err:
            return refuse(err, endpoint)
        except BadRequest as err:
            return refuse(Refused(400, str(err), "invalid_request_error"), endpoint)
        finally:
            if isinstance(response, HeldStream):
                response.release = release
            else:
                release()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        from .fields import check_fields
        from .upstream import UpstreamError

        started = time.perf_counter()

        async def handle():
            body = await read_body(request)
            if not isinstance(body.get("messages"), list) or not body["messages"]:
                raise BadRequest("messages must be a non-empty list")
            check_fields(body, model_required=getattr(options.upstream, "needs_model", False))
            if options.request_log:
                log_request(options.request_log, body)
            if agentic is not None:  # the upstream may ask for tools itself
                return await agentic(body, query_of, metrics, Refused, store.lease)
            info, forward = {}, body
            query = await query_of(body) if plugin is not None else None
            with store.lease(query.audio) if query is not None else nullcontext():
                if query is not None:
                    augmented = await asyncio.to_thread(plugin.augment_query, body["messages"], query)
                    for stage, seconds in augmented.seconds.items():
                        metrics.stage.labels(stage).observe(seconds)
                    for tool in augmented.failed:
                        metrics.tool_errors.labels(tool).inc()
                    info = {
                        "tools": augmented.tools,
                        "tools_failed": augmented.failed,
                        "plugin": plugin.content_hash,
                        "seconds": {k: round(v, 4) for k, v in augmented.seconds.items()},
                    }
                    if query.seconds > options.tools_max_seconds:
                        info["tools_heard_s"] = options.tools_max_seconds
                    if augmented.messages != body["messages"]:
                        forward = {**body, "messages": augmented.messages}
                upstream_started = time.perf_counter()
                try:
                    if body.get("stream"):
                        lines = await options.upstream.stream(forward)
                        return HeldStream(
                            held(lines, metrics), media_type="text/event-stream", headers=headers_of(info)
                        )
                    reply = await options.upstream.complete(forward)
                except UpstreamError as err:
                    metrics.upstream_errors.inc()
                    if err.status is not None:
                        raise Refused(err.status, str(err), "upstream_refused") from None
                    raise Refused(502, str(err), "upstream_error") from None
            upstream_seconds = time.perf_counter() - upstream_started
            metrics.stage.labels("upstream").observe(upstream_seconds)
            metrics.stage.labels("total").observe(time.perf_counter() - started)
            metrics.requests.labels("chat", "200").inc()
            if info:
                info["seconds"] |= {
                    "upstream": round(upstream_seconds, 4),
                    "total": round(time.perf_counter() - started, 4),
                }
                reply = {**reply, "autagent": info}
            return JSONResponse(reply, headers=headers_of(info))

        return await admitted_call(handle, "chat")

    @app.post("/v1/select")
    async def select(request: Request):
        async def handle():
            if plugin is None:
                raise Refused(404, "no plugin: start the service with --plugin", "invalid_request_error")
            body = await read_body(request)
            parts = [{"type": "text", "text": str(body.get("question", ""))}]
            if "audio_url" in body:
                parts.append({"type": "audio_url", "audio_url": {"url": body["audio_url"]}})
            else:
                parts.append(
                    {
                        "type": "input_audio",
                        "input_audio": {"data": body.get("audio"), "format": body.get("format", "wav")},
                    }
                )
            choices = body.get("choices") or []
            query = await query_of({"messages": [{"role": "user", "content": parts}], "choices": choices})
            with store.lease(query.audio):
                tools = await asyncio.to_thread(plugin.select, query.audio, query.question, query.choices)
                probabilities = await asyncio.to_thread(
                    plugin.probabilities, query.audio, query.question, query.choices
                )
                reply = {"tools": tools, "probabilities": probabilities, "plugin": plugin.content_hash}
                if body.get("explain") is True:  # per tool: probabilities, the unfamiliar input, the back-off's say
                    reply["explain"] = await asyncio.to_thread(
                        plugin.explain, query.audio, query.question, query.choices
                    )
            metrics.requests.labels("select", "200").inc()
            return JSONResponse(reply)

        return await admitted_call(handle, "select")

    @app.get("/health")
    async def health():
        return {
            "status": "ok",
            "plugin": plugin.content_hash if plugin else None,
            "upstream": options.upstream.name,
            "in_flight": admitted["count"],
            "realtime_sessions": app.state.realtime_sessions["count"],
        }

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.text(), media_type="text/plain; version=0.0.4")

    @app.exception_handler(Exception)
    async def unexpected(request, err):  # the service stays up and says what happened
        metrics.errors.labels("internal_error").inc()
        return JSONResponse(
            error_body(f"internal error: {type(err).__name__}: {err}", "internal_error"), status_code=500
        )

    @app.on_event("startup")
    async def workers():
        # every request's blocking work (decoding, selection, tools, a reasoner in process) runs in a
        # thread of its own: as many threads as requests may run at once, plus a few for the rest
        workers = options.max_concurrency + options.max_realtime_sessions + options.extra_workers
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(workers, thread_name_prefix="autagent-work"))

    @app.on_event("shutdown")
    async def close():
        await options.upstream.close()

    from .realtime import add_realtime

    add_realtime(app, options, metrics, options.upstream.complete)
    return app


class HeldStream(StreamingResponse):
    """A streamed reply that keeps its request's slot until the stream ends (``release`` is set by
    the admission and called by :func:`held` when the last line is sent or the client goes away)."""

    release = None

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.release is not None:
                self.release()


async def held(lines, metrics):
    """The upstream's lines, then, if it fails mid-way, an OpenAI-shaped error event and ``[DONE]``
    (what the ``openai`` SDK raises as an ``APIError``), never a broken stream."""
    try:
        async for line in lines:
            yield line
    except Exception as err:  # noqa: BLE001 - whatever broke upstream, the client gets an error event
        metrics.upstream_errors.inc()
        message = f"the upstream failed mid-stream: {type(err).__name__}: {err}"
        yield f"data: {json.dumps(error_body(message, 'upstream_error'))}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        close = getattr(lines, "aclose", None)
        if close is not None:
            await close()


def log_request(path: str, body: dict) -> None:
    from ..reasoners.chat import BadRequest, last_user_content, text_of

    try:
        text = text_of(last_user_content(body["messages"]))
    except BadRequest:
        text = None
    row = {"time": round(time.time(), 3), "model": body.get("model"), "stream": bool(body.get("stream")), "text": text}
    with open(path, "a") as handle:
        handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def headers_of(info: dict) -> dict:
    if not info:
        return {}
    return {"X-AutAgent-Tools": ",".join(info["tools"]), "X-AutAgent-Plugin": info["plugin"]}

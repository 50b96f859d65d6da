"""The HTTP service (FastAPI): an OpenAI-compatible ``/v1/chat/completions`` with a plugin in front of
any upstream, ``/v1/select``, ``/health`` and Prometheus ``/metrics``.

Every refused request gets an OpenAI-shaped JSON error and the service stays up: 400 for a request
it cannot read (no audio, audio it cannot decode, too big or too long, a ``file:`` URL or a path,
remote audio unless allowed, bad JSON or messages), 429 with ``Retry-After`` once ``max_concurrency``
requests run and ``max_queue`` wait, 502 naming the upstream when it is down or answers junk.  A tool
that fails drops only its record (named in the reply's ``autagent`` field).  Selection, tools and a
reasoner in process run in a worker thread, one request at a time, so ``/health`` always answers.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

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
    max_audio_seconds: float = 600.0
    """Longest clip accepted."""
    allow_remote_audio: bool = False
    """Fetch ``http(s)`` audio URLs (refused otherwise)."""
    audio_dir: str = ".cache/serve-audio"
    """Where clips are kept, named by their content."""
    request_log: str | None = None
    """Append one JSON line per chat request received: its time, model and the text of its last user
    message (never the audio, never a header)."""


class Refused(Exception):
    def __init__(self, status: int, message: str, kind: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.kind, self.headers = status, kind, headers or {}


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
    work = threading.Lock()  # selection and tools: one request at a time, off the event loop
    plugin = options.plugin

    def refuse(err: Refused, endpoint: str) -> JSONResponse:
        metrics.requests.labels(endpoint, str(err.status)).inc()
        metrics.errors.labels(err.kind).inc()
        return JSONResponse(error_body(str(err), err.kind), status_code=err.status, headers=err.headers)

    async def read_body(request: Request) -> dict:
        try:
            body = await request.json()
        except ValueError:
            raise Refused(400, "the body is not JSON", "invalid_request_error") from None
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object", "invalid_request_error")
        return body

    async def query_of(body: dict):
        """The request's clip (fetched if remote and allowed, checked for size and length), question
        and choices."""
        from tools.audio import AudioError, load_audio

        from ..reasoners.chat import read_query, store_audio

        folder = Path(options.audio_dir)
        query = read_query(body.get("messages"), body.get("choices"), folder, options.max_audio_bytes)
        if query.remote:
            if not options.allow_remote_audio:
                raise BadRequest("remote audio URLs are refused (start the service with --allow-remote-audio)")
            raw = await fetch(query.remote["url"], options.max_audio_bytes)
            query.audio = str(
                store_audio(raw, Path(query.remote["url"]).suffix.lstrip(".") or "wav", folder, options.max_audio_bytes)
            )
        try:
            audio = await asyncio.to_thread(load_audio, query.audio, 16000, options.max_audio_seconds + 1.0)
        except AudioError as err:
            raise BadRequest(f"the audio cannot be used: {str(err).split(': ', 1)[-1]}") from None
        if audio.duration > options.max_audio_seconds:
            raise BadRequest(f"the audio is longer than {options.max_audio_seconds:g} s")
        return query

    async def admitted_call(handler, endpoint: str):
        if admitted["count"] >= options.max_concurrency + options.max_queue:
            return refuse(
                Refused(429, "too many requests: try again shortly", "rate_limit_error", {"Retry-After": "1"}), endpoint
            )
        admitted["count"] += 1
        metrics.in_flight.inc()
        try:
            async with slots:
                return await handler()
        except Refused as err:
            return refuse(err, endpoint)
        except BadRequest as err:
            return refuse(Refused(400, str(err), "invalid_request_error"), endpoint)
        finally:
            admitted["count"] -= 1
            metrics.in_flight.dec()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        from .upstream import UpstreamError

        started = time.perf_counter()
        try:
            body = await read_body(request)
        except Refused as err:
            return refuse(err, "chat")

        async def handle():
            if not isinstance(body.get("messages"), list) or not body["messages"]:
                raise BadRequest("messages must be a non-empty list")
            if options.request_log:
                log_request(options.request_log, body)
            info, forward = {}, body
            if plugin is not None:
                query = await query_of(body)
                augmented = await asyncio.to_thread(locked, plugin.augment_query, body["messages"], query)
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
                if augmented.messages != body["messages"]:
                    forward = {**body, "messages": augmented.messages}
            upstream_started = time.perf_counter()
            try:
                if body.get("stream"):
                    lines = await options.upstream.stream(forward)
                    return StreamingResponse(lines, media_type="text/event-stream", headers=headers_of(info))
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
            tools = await asyncio.to_thread(locked, plugin.select, query.audio, query.question, query.choices)
            probabilities = await asyncio.to_thread(
                locked, plugin.probabilities, query.audio, query.question, query.choices
            )
            reply = {"tools": tools, "probabilities": probabilities, "plugin": plugin.content_hash}
            if body.get("explain") is True:  # per tool: probabilities, the unfamiliar input, the back-off's say
                reply["explain"] = await asyncio.to_thread(
                    locked, plugin.explain, query.audio, query.question, query.choices
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

    @app.on_event("shutdown")
    async def close():
        await options.upstream.close()

    def locked(function, *args):
        with work:
            return function(*args)

    return app


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


async def fetch(url: str, max_bytes: int) -> bytes:
    """Remote audio, at most ``max_bytes`` (a 400 past that or when the fetch fails)."""
    import httpx

    from ..reasoners.chat import BadRequest

    try:
        async with httpx.AsyncClient(timeout=30.0, follow_redirects=True) as client:
            async with client.stream("GET", url) as response:
                if response.status_code != 200:
                    raise BadRequest(f"fetching the audio failed: HTTP {response.status_code}")
                chunks, size = [], 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise BadRequest(f"the audio is over the {max_bytes}-byte limit")
                    chunks.append(chunk)
    except httpx.HTTPError as err:
        raise BadRequest(f"fetching the audio failed: {type(err).__name__}") from None
    if not chunks:
        raise BadRequest("the audio is empty")
    return b"".join(chunks)

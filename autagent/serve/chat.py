"""``POST /v1/chat/completions``: the plugin's tools' records added in front of the request's clip,
then the request forwarded to the upstream (or, under ``--agentic``, the loop in which the upstream
asks for tools itself: :mod:`.tool_calls`); a streamed answer keeps its slot until its last line and
ends with an error event when the upstream fails mid-way.

The request is validated once and handed down as one object (:class:`.chat_call.ChatCall`) to the
upstream call, its clip read once.  A reply to a question with choices says which choice the
upstream's answer is (``autagent.answer``: ``{index, label, text}``, or null when it names none or
several), the answer itself left as the model wrote it."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import nullcontext

from fastapi import Request
from fastapi.responses import JSONResponse

from ..reasoners.messages import BadRequest, last_user_content, text_of
from .chat_call import ChatCall, answer_choice
from .errors import ErrorResponse
from .limits import Refused
from .protocol import ChatRequest, openapi_body
from .service import HeldStream, Service
from .tool_calls import AgenticChat
from .upstream import UpstreamError


def add_chat(app, service: Service) -> None:
    agentic = AgenticChat(service) if service.options.agentic else None

    @app.post("/v1/chat/completions", openapi_extra=openapi_body(ChatRequest, 502, 504))
    async def chat_completions(request: Request):
        started = time.perf_counter()
        return await service.admit(request, lambda body: _handle(service, agentic, body, started), "chat")


async def _handle(service: Service, agentic, body: dict, started: float):
    options, metrics, plugin = service.options, service.metrics, service.plugin
    call = ChatCall.checked(body, model_required=getattr(service.upstream, "needs_model", False))
    if options.request_log:  # written off the event loop
        await asyncio.to_thread(log_request, options.request_log, body)
    if agentic is not None:  # the upstream may ask for tools itself
        return await agentic(body)
    info = {}
    augment = lambda query: plugin.augment_query(body["messages"], query)  # noqa: E731 - in the clip's thread
    async with service.clip(call, augment) if plugin is not None else nullcontext((None, None)) as (query, augmented):
        if query is not None:
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
            if query.seconds > service.tools_max_seconds:
                info["tools_heard_s"] = service.tools_max_seconds
            if augmented.messages != body["messages"]:
                call.messages = augmented.messages
        upstream_started = time.perf_counter()
        try:
            if body.get("stream"):
                lines = await service.upstream.stream(call)
                return HeldStream(held(lines, metrics), media_type="text/event-stream", headers=headers_of(info))
            reply = await service.upstream.complete(call)
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
        info["seconds"] |= {"upstream": round(upstream_seconds, 4), "total": round(time.perf_counter() - started, 4)}
    choices = call.choices
    if choices:  # which one the answer is, the answer as written
        info["answer"] = answer_choice(reply, choices)
    if info:
        reply = {**reply, "autagent": info}
    return JSONResponse(reply, headers=headers_of(info))


async def held(lines, metrics):
    """The upstream's lines, then, if it fails mid-way, an OpenAI-shaped error event and ``[DONE]``
    (what the ``openai`` SDK raises as an ``APIError``), never a broken stream."""
    try:
        async for line in lines:
            yield line
    except Exception as err:  # noqa: BLE001 - whatever broke upstream, the client gets an error event
        metrics.upstream_errors.inc()
        message = f"the upstream failed mid-stream: {type(err).__name__}: {err}"
        yield ErrorResponse.of(message, "upstream_error").event()
        yield "data: [DONE]\n\n"
    finally:
        close = getattr(lines, "aclose", None)
        if close is not None:
            await close()


def log_request(path: str, body: dict) -> None:
    try:
        text = text_of(last_user_content(body["messages"]))
    except BadRequest:
        text = None
    row = {"time": round(time.time(), 3), "model": body.get("model"), "stream": bool(body.get("stream")), "text": text}
    with open(path, "a") as handle:
        handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def headers_of(info: dict) -> dict:
    if "tools" not in info:
        return {}
    return {"X-AutAgent-Tools": ",".join(info["tools"]), "X-AutAgent-Plugin": info["plugin"]}

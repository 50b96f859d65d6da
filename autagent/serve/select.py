"""``POST /v1/select``: the plugin's choice of tools (and each tool's probability) for a clip and a
question, without running them; ``explain: true`` adds why (per tool: probabilities, unfamiliar
input, the back-off's say)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from ..reasoners.messages import BadRequest, check_text
from .limits import Refused
from .protocol import SELECT_REQUEST, openapi_body
from .service import Service


def add_select(app, service: Service) -> None:
    @app.post("/v1/select", openapi_extra=openapi_body(SELECT_REQUEST, 404))
    async def select(request: Request):
        if service.plugin is None:
            return service.refuse(
                Refused(404, "no plugin: start the service with --plugin", "invalid_request_error"), "select"
            )
        return await service.admit(request, lambda body: _handle(service, body), "select")


async def _handle(service: Service, body: dict):
    plugin = service.plugin
    question = body.get("question", "")
    if not isinstance(question, str):
        raise BadRequest(f"question must be a string, got {type(question).__name__}")
    check_text(question, "question")
    parts = [{"type": "text", "text": question}]
    if "audio_url" in body:
        parts.append({"type": "audio_url", "audio_url": {"url": body["audio_url"]}})
    else:
        parts.append(
            {"type": "input_audio", "input_audio": {"data": body.get("audio"), "format": body.get("format", "wav")}}
        )
    choices = body.get("choices") or []
    explain = body.get("explain") is True

    def choose(query) -> dict:  # in the clip's worker thread
        asked = (query.audio, query.question, query.choices)
        reply = {"tools": plugin.select(*asked), "probabilities": plugin.probabilities(*asked)}
        return reply | {"plugin": plugin.content_hash} | ({"explain": plugin.explain(*asked)} if explain else {})

    reply = await service.on_clip({"messages": [{"role": "user", "content": parts}], "choices": choices}, choose)
    service.metrics.requests.labels("select", "200").inc()
    return JSONResponse(reply)

"""``POST /v1/select``: the plugin's choice of tools (and each tool's probability) for a clip and a
question, without running them; ``explain: true`` adds why (per tool: probabilities, unfamiliar
input, the back-off's say)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from ..reasoners.messages import check_text
from .limits import Refused
from .protocol import SelectRequest, openapi_body
from .service import Service


def add_select(app, service: Service) -> None:
    @app.post("/v1/select", openapi_extra=openapi_body(SelectRequest, 404))
    async def select(request: Request):
        if service.plugin is None:
            return service.refuse(
                Refused(404, "no plugin: start the service with --plugin", "invalid_request_error"), "select"
            )
        return await service.admit(request, lambda body: _handle(service, body), "select")


async def _handle(service: Service, body: dict):
    plugin, sent = service.plugin, SelectRequest.checked(body)
    check_text(sent.question, "question")
    parts = [{"type": "text", "text": sent.question}]
    if sent.audio_url is not None:
        parts.append({"type": "audio_url", "audio_url": {"url": sent.audio_url}})
    else:
        parts.append({"type": "input_audio", "input_audio": {"data": sent.audio, "format": sent.format}})
    choices, explain = sent.choices or [], sent.explain

    def choose(query) -> dict:  # in the clip's worker thread
        asked = (query.audio, query.question, query.choices)
        reply = {"tools": plugin.select(*asked), "probabilities": plugin.probabilities(*asked)}
        return reply | {"plugin": plugin.content_hash} | ({"explain": plugin.explain(*asked)} if explain else {})

    reply = await service.on_clip({"messages": [{"role": "user", "content": parts}], "choices": choices}, choose)
    service.metrics.requests.labels("select", "200").inc()
    return JSONResponse(reply)

"""The HTTP service (FastAPI), one module per endpoint as vLLM's OpenAI server lays them out:
``/v1/chat/completions`` (:mod:`.chat`), ``/v1/select`` (:mod:`.select`), ``/v1/realtime``
(:mod:`.realtime`), ``/health``, ``/v1/models`` and ``/metrics`` (:mod:`.health`); what they share
(admission, refusals, reading a clip) is :mod:`.service`, the settings :mod:`.options`.

Every refused request gets an OpenAI-shaped JSON error and the service stays up: 400 for a request
it cannot read (no audio, audio it cannot decode, too big or too long, a ``file:`` URL or a path,
remote audio unless allowed, bad JSON or messages, an unknown field or one of the wrong type), 413 for
a body over the limit, 429 with ``Retry-After`` once ``max_concurrency`` requests run and
``max_queue`` wait (decided before the body is read), 502 when the upstream is down or answers junk.
Before any of it, :mod:`.access` checks the Host, a WebSocket's Origin, the API key and a POST's
content type.  A tool that fails drops only its record (named in the reply's ``autagent`` field).  Decoding, hashing
and storing the clip, selection, tools and a reasoner in process run in worker threads (as many as
``max_concurrency`` allows, no lock shared between requests), so ``/health`` always answers.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from .access import Guard
from .chat import add_chat
from .errors import ErrorResponse
from .health import add_health
from .realtime import add_realtime
from .select import add_select
from .service import Service, internal_error


def create_app(service: Service):
    app = FastAPI(
        title="AuTAgent",
        description="A trained tool-selection plugin in front of an audio model.",
        docs_url=None,  # FastAPI's pages load their scripts from a CDN: blank offline (issue 63)
        redoc_url=None,
    )
    options = service.options

    @app.get("/docs", include_in_schema=False)
    async def docs():
        return HTMLResponse(docs_page(app.openapi()))

    @app.exception_handler(Exception)
    async def unexpected(request, err):  # the service stays up; the client learns nothing of its insides
        service.metrics.errors.labels("internal_error").inc()
        return ErrorResponse.of(internal_error(err), "internal_error").reply(500)

    @app.on_event("startup")
    async def workers():
        # every request's blocking work (decoding, selection, tools, a reasoner in process) runs in a
        # thread of its own: as many threads as requests may run at once, plus a few for the rest
        workers = options.max_concurrency + options.max_realtime_sessions + options.extra_workers
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(workers, thread_name_prefix="autagent-work"))

    @app.on_event("shutdown")
    async def close():
        await service.upstream.close()

    app.add_middleware(
        Guard,
        api_key=options.api_key,
        hosts=options.allowed_hosts,
        origins=options.allowed_origins,
        refused=lambda code: service.metrics.errors.labels(code).inc(),
    )
    add_chat(app, service)
    add_select(app, service)
    add_realtime(app, service)
    add_health(app, service)
    return app


def docs_page(schema: dict) -> str:
    """``/docs``: every endpoint, its body's fields and its answers, from the OpenAPI document, as one
    page that needs nothing but itself (no script, no style sheet, nothing fetched)."""
    from html import escape

    rows = []
    for path, methods in schema.get("paths", {}).items():
        for method, operation in methods.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            fields = "".join(
                f"<li><code>{escape(name)}</code> {escape(str(field.get('type', '')))}"
                f"{' (required)' if name in body.get('required', []) else ''}"
                f"{': ' + escape(field['description']) if field.get('description') else ''}</li>"
                for name, field in body.get("properties", {}).items()
            )
            statuses = ", ".join(escape(code) for code in operation.get("responses", {}))
            rows.append(
                f"<h2><code>{escape(method.upper())} {escape(path)}</code></h2>"
                f"<p>{escape(operation.get('summary', ''))}</p>"
                + (f"<p>Body (JSON):</p><ul>{fields}</ul>" if fields else "")
                + f"<p>Answers: {statuses}</p>"
            )
    info = schema.get("info", {})
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(info.get('title', ''))}</title></head>"
        f"<body><h1>{escape(info.get('title', ''))}</h1><p>{escape(info.get('description', ''))}</p>"
        f"<p>The whole schema: <a href='openapi.json'>openapi.json</a>.</p>{''.join(rows)}</body></html>"
    )

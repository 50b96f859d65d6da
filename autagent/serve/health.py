"""``GET /health``, ``GET /v1/models`` and Prometheus ``GET /metrics``: what a load balancer (no key
needed, nothing told but that the service is up and how busy), an OpenAI client listing models and a
scraper ask."""

from __future__ import annotations

import time

from fastapi.responses import Response

from .service import Service


def add_health(app, service: Service) -> None:
    @app.get("/health")
    async def health():
        # nothing about the upstream (its address is the operator's business, not a client's)
        return {"status": "ok", "in_flight": service.admitted, "realtime_sessions": service.realtime}

    @app.get("/v1/models")
    async def models():
        name = service.options.model or service.options.reasoner or "autagent"
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": int(time.time()), "owned_by": "autagent"}],
        }

    @app.get("/metrics")
    async def prometheus():
        return Response(service.metrics.text(), media_type="text/plain; version=0.0.4")

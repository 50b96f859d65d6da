"""Who may use the service, checked before any endpoint runs (an ASGI wrapper of the whole app, HTTP
and WebSocket alike; ``autagent mcp`` over HTTP is wrapped the same way):

* the Host header must be one the service is reached by (``--allowed-hosts``; localhost's names by
  default), so that a web page cannot rebind a name of its own to the service's address;
* a WebSocket (with ``http_origins``, as ``autagent mcp`` over HTTP: any request) that carries an
  ``Origin`` (a browser's) must come from an allowed origin
  (``--allowed-origins``; none by default), so that a web page cannot open ``/v1/realtime`` on a
  service on the visitor's machine; programs (the SDK, ``websockets``) send no Origin;
* with ``--api-key`` (or ``AUTAGENT_API_KEY``), ``Authorization: Bearer <key>`` on everything but
  ``/health``, compared in constant time;
* a POST's body must be declared ``application/json``: a page can send ``text/plain`` across origins
  without asking, never JSON.

A refusal is an OpenAI-shaped error (400 host, 401 key, 403 origin, 415 content type) or, for a
WebSocket, the handshake refused (403) before anything is read."""

from __future__ import annotations

import hmac

from .errors import ErrorResponse

OPEN_PATHS = ("/health",)
"""Asked by load balancers without a key; it tells nothing but that the service is up."""


def host_name(value: str) -> str:
    """A Host header's name, less its port (``[::1]:8000`` -> ``[::1]``), lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """The checks above around ``app``; ``refused(kind)`` counts each refusal (the service's metrics)."""

    def __init__(self, app, api_key: str | None, hosts, origins, refused=None, http_origins: bool = False):
        self.app, self.refused, self.http_origins = app, refused, http_origins
        self.key = api_key.encode() if api_key else None
        self.hosts = {h.lower() for h in hosts}
        self.origins = {o.lower().rstrip("/") for o in origins}

    def problem(self, scope: dict, headers: dict) -> tuple[int, str, str] | None:
        host = host_name(headers.get("host", ""))
        if "*" not in self.hosts and host not in self.hosts:
            return 400, "the Host header is not one this service is reached by (--allowed-hosts)", "invalid_host"
        origin = headers.get("origin")
        checked = scope["type"] == "websocket" or self.http_origins
        if checked and origin is not None and "*" not in self.origins:
            if origin.lower().rstrip("/") not in self.origins:
                return 403, "this Origin may not use the service (--allowed-origins)", "invalid_origin"
        if self.key is not None and scope.get("path") not in OPEN_PATHS:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.key):
                return 401, "a valid API key is required: Authorization: Bearer <key>", "invalid_api_key"
        if scope["type"] == "http" and scope.get("method") == "POST":
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                return 415, "the body must be sent as Content-Type: application/json", "unsupported_media_type"
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        problem = self.problem(scope, headers)
        if problem is None:
            return await self.app(scope, receive, send)
        status, message, code = problem
        if self.refused is not None:
            self.refused(code)
        if scope["type"] == "websocket":  # before accept: the handshake is answered 403
            await send({"type": "websocket.close", "code": 1008, "reason": code})
            return
        kind = "authentication_error" if status == 401 else "invalid_request_error"
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
        await ErrorResponse.of(message, kind, code).reply(status, headers)(scope, receive, send)

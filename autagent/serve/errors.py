"""The one error response of ``autagent serve``'s HTTP endpoints, as OpenAI's API and vLLM's
``ErrorResponse`` shape it: ``{"error": {message, type, param, code}}``, what the ``openai`` SDK raises
as an ``APIError``.  Every refusal and failure renders it (:meth:`ErrorResponse.reply`, or
:meth:`ErrorResponse.event` as a stream's last event), and the OpenAPI document publishes its schema
for every refusal (:data:`.protocol.ERROR`)."""

from __future__ import annotations

from fastapi.responses import JSONResponse
from pydantic import BaseModel


class ErrorInfo(BaseModel):
    """What went wrong, as OpenAI's API words it."""

    message: str
    """One line for the client: never a path, a URL of ours or a traceback (:func:`.service.internal_error`)."""
    type: str
    """The kind (``invalid_request_error``, ``rate_limit_error``, ``upstream_error``, ``internal_error``...)."""
    param: str | None = None
    """The request field at fault, when one is (``messages[0].content[1].input_audio.format``)."""
    code: str | None = None
    """A reason code a client may branch on (``client_disconnected``, ``invalid_api_key``...)."""


class ErrorResponse(BaseModel):
    """Every refusal and failure the service answers, as OpenAI's API and vLLM's ``ErrorResponse`` shape
    it (``{"error": {message, type, param, code}}``: what the ``openai`` SDK raises as an ``APIError``),
    rendered by one class wherever it is sent: a JSON reply (:meth:`reply`) or a streamed reply's last
    event (:meth:`event`)."""

    error: ErrorInfo

    @classmethod
    def of(cls, message: str, kind: str, code: str | None = None, param: str | None = None) -> ErrorResponse:
        return cls(error=ErrorInfo(message=message, type=kind, param=param, code=code))

    def body(self) -> dict:
        return self.model_dump()

    def reply(self, status: int, headers: dict | None = None) -> JSONResponse:
        """The JSON reply of HTTP status ``status``."""
        return JSONResponse(self.body(), status_code=status, headers=headers)

    def event(self) -> str:
        """The server-sent event a stream that fails mid-way ends with (then ``[DONE]``)."""
        return f"data: {self.model_dump_json()}\n\n"

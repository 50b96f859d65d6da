"""The request bodies of ``autagent serve``'s endpoints as JSON Schema, published in the OpenAPI
document FastAPI serves (``/openapi.json``): what a client, a code generator and the API fuzzer
(``tests/serve/test_serve_fuzz.py``) read.  The endpoints check their bodies themselves (an unknown or
mistyped field is a 400 naming it): these schemas describe, they do not validate."""

from __future__ import annotations

from ..reasoners.messages import FORMATS

TEXT_PART = {
    "type": "object",
    "required": ["type", "text"],
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
}
AUDIO_PART = {
    "type": "object",
    "required": ["type", "input_audio"],
    "properties": {
        "type": {"const": "input_audio"},
        "input_audio": {
            "type": "object",
            "required": ["data", "format"],
            "properties": {
                "data": {"type": "string", "description": "The clip's bytes in base64."},
                "format": {"enum": sorted(FORMATS)},
            },  # fmt: skip
        },
    },
}
AUDIO_URL_PART = {
    "type": "object",
    "required": ["type", "audio_url"],
    "properties": {
        "type": {"const": "audio_url"},
        "audio_url": {
            "type": "object",
            "required": ["url"],
            "properties": {"url": {"type": "string", "description": "data:audio/<format>;base64,... or http(s)"}},
        },
    },
}
MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"enum": ["system", "user", "assistant", "tool"]},
        "content": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"anyOf": [TEXT_PART, AUDIO_PART, AUDIO_URL_PART]}},
            ]
        },
    },
}
CHAT_REQUEST = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "minItems": 1, "items": MESSAGE},
        "choices": {"type": "array", "items": {"type": "string"}, "description": "The answer choices (ours)."},
        "stream": {"type": "boolean"},
        "temperature": {"type": "number"},
        "max_tokens": {"type": "integer"},
        "tools": {"type": "array", "items": {"type": "object"}},
    },
}
SELECT_REQUEST = {
    "type": "object",
    "required": ["question"],
    "properties": {
        "audio": {"type": "string", "description": "The clip's bytes in base64."},
        "format": {"enum": sorted(FORMATS)},
        "audio_url": {"type": "string"},
        "question": {"type": "string"},
        "choices": {"type": "array", "items": {"type": "string"}},
        "explain": {"type": "boolean"},
    },
}
ERROR = {"description": "An OpenAI-shaped error: {error: {message, type, param, code}}"}


def openapi_body(schema: dict, *refusals: int) -> dict:
    """``openapi_extra`` for an endpoint taking ``schema`` as its JSON body, refusing with ``refusals``."""
    responses = {str(status): ERROR for status in (400, 401, 408, 413, 415, 429, *refusals)}
    return {
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        "responses": responses,
    }

"""The request bodies of ``autagent serve``'s endpoints as pydantic models, as vLLM's
``entrypoints/openai/protocol.py`` has them: the one place a body is checked (each endpoint validates
the object its hardened reader parsed, deep JSON and size refused before: :meth:`Request.checked`),
and the JSON Schema published in the OpenAPI document (``/openapi.json``) that a client, a code
generator and the API fuzzer (``tests/serve/test_serve_fuzz.py``) read.

A chat-completions field is known when the ``openai`` SDK's ``chat.completions.create`` takes it, when
it is one of vLLM's sampling and template extras (``top_k``, ``min_p``...; sent upstream through
``extra_body``, as vLLM's own docs say to), or ``choices`` (ours, never forwarded as a field: the
upstream reads them in the last user message's text, :func:`autagent.reasoners.messages.with_choices`).
Fields the models do not type are kept (``extra="allow"``, as vLLM's are) and forwarded as sent, but a
name outside those sets is a 400 naming it, as OpenAI's API answers: a misspelt ``temprature`` is not silently dropped.
Types are strict, as the SDK sends them (``"0.5"`` is not a number, ``1`` not a boolean).  A refusal is
one line naming the field's path (``messages[0].content[1].input_audio.format must be one of ...``):
:func:`refusal`.
"""

from __future__ import annotations

import functools
import inspect
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..reasoners.messages import FORMATS, MAX_CHOICES, BadRequest
from .errors import ErrorResponse

VLLM_EXTRAS = frozenset(
    {
        "top_k",
        "min_p",
        "repetition_penalty",
        "length_penalty",
        "min_tokens",
        "ignore_eos",
        "best_of",
        "use_beam_search",
        "stop_token_ids",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "truncate_prompt_tokens",
        "prompt_logprobs",
        "allowed_token_ids",
        "bad_words",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "guided_decoding_backend",
        "structured_outputs",
        "chat_template",
        "chat_template_kwargs",
        "add_generation_prompt",
        "continue_final_message",
        "echo",
        "documents",
        "mm_processor_kwargs",
        "priority",
        "request_id",
        "return_tokens_as_token_ids",
        "thinking_token_budget",
        "vllm_xargs",
    }
)
OURS = frozenset({"choices"})
MAX_MESSAGES = 1024
"""A chat request's messages at most (a long conversation with tool calls holds a few hundred)."""
MAX_PARTS = 1024
"""Content parts of all its messages together at most."""
MAX_ITEMS = 1024
"""Any other list at the top of a body (``tools``, ``stop``...) at most: pydantic records one error
per bad item, and 6.4 MB of ``{}`` in ``messages`` added 1,850 MiB and held the event loop 12.8 s
(issue 62); under these caps a body's worst errors take a few milliseconds."""


@functools.lru_cache(maxsize=1)
def sdk_fields() -> frozenset:
    """The parameters of the SDK's ``chat.completions.create`` (less its own transport options)."""
    from openai.resources.chat.completions import AsyncCompletions

    names = set(inspect.signature(AsyncCompletions.create).parameters) - {"self"}
    return frozenset(names - {"extra_headers", "extra_query", "extra_body", "timeout"})


def split_for_sdk(body: dict) -> tuple[dict, dict]:
    """(the SDK's keyword arguments, the rest for ``extra_body``), less our own fields."""
    known = sdk_fields()
    payload = {k: v for k, v in body.items() if k in known}
    extra = {k: v for k, v in body.items() if k not in known and k not in OURS}
    return payload, extra


class Open(BaseModel):
    """A JSON object of the request: strict types; fields not typed here kept as sent (vLLM's
    ``OpenAIBaseModel`` allows them too: an SDK newer than ours adds some)."""

    model_config = ConfigDict(strict=True, extra="allow")


def _lower(value):
    return value.lower() if isinstance(value, str) else value


AudioFormat = Annotated[Literal[tuple(sorted(FORMATS))], BeforeValidator(_lower)]
"""A clip's format, in any case (``WAV`` is ``wav``), as the clip reader takes it."""


READ_PARTS = ("text", "input_audio", "audio_url")
"""The content parts the service reads; any other is forwarded as sent."""


class TextPart(Open):
    type: Literal["text"]
    text: str


class InputAudio(Open):
    data: str = Field(description="The clip's bytes in base64.")
    format: AudioFormat


class InputAudioPart(Open):
    type: Literal["input_audio"]
    input_audio: InputAudio


class AudioUrl(Open):
    url: str = Field(description="data:audio/<format>;base64,... (or http(s) with --allow-remote-audio)")


class AudioUrlPart(Open):
    type: Literal["audio_url"]
    audio_url: AudioUrl


class OtherPart(Open):
    """A part the service does not read (``image_url``, ``refusal``...): forwarded as sent."""

    type: str = Field(json_schema_extra={"not": {"enum": list(READ_PARTS)}})


def _kind_of_part(part) -> str:
    kind = part.get("type") if isinstance(part, dict) else getattr(part, "type", None)
    return f"{kind} part" if kind in READ_PARTS else "other part"


Part = Annotated[
    Annotated[TextPart, Tag("text part")]
    | Annotated[InputAudioPart, Tag("input_audio part")]
    | Annotated[AudioUrlPart, Tag("audio_url part")]
    | Annotated[OtherPart, Tag("other part")],
    Discriminator(_kind_of_part),
]


def _text_or_parts(value):
    if value is not None and not isinstance(value, str | list):
        raise PydanticCustomError(
            "content_type", "must be text or a list of content parts, got {got}", {"got": json_type(value)}
        )
    return value


class Message(Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Annotated[str | list[Part] | None, BeforeValidator(_text_or_parts)] = None
    """None (or absent) only in an assistant's message that calls tools."""


class Request(Open):
    """A request body; :meth:`checked` is how an endpoint reads one."""

    refused_extras: ClassVar[bool] = False
    """Whether a field not typed here is a 400 unless :meth:`known_extra` says otherwise."""

    @classmethod
    def known_extra(cls, name: str) -> bool:
        return False

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields(cls, body):
        if cls.refused_extras and isinstance(body, dict):
            unknown = sorted(k for k in body if k not in cls.model_fields and not cls.known_extra(k))
            if unknown:
                raise PydanticCustomError(
                    "unknown_field",
                    "unknown request field {name} (the service passes on OpenAI's and vLLM's fields)",
                    {"name": repr(unknown[0])},
                )
        return body

    list_caps: ClassVar[dict] = {}
    """The items a top-level list may have, by field (others: :data:`MAX_ITEMS`)."""

    @classmethod
    def sized(cls, body) -> None:
        """:class:`Invalid` naming the first list over its cap, checked before the model (its cost
        and its errors are then bounded by the caps, not by the body's bytes)."""
        for name, value in body.items() if isinstance(body, dict) else ():
            if isinstance(value, list) and len(value) > cls.list_caps.get(name, MAX_ITEMS):
                most = cls.list_caps.get(name, MAX_ITEMS)
                raise Invalid(f"{name} has {len(value)} items, over the {most}-item limit", name)

    @classmethod
    def checked(cls, body, **context):
        """``body`` (the parsed JSON) as this model, or :class:`Invalid`: one line naming the field."""
        cls.sized(body)
        try:
            return cls.model_validate(body, context=context)
        except ValidationError as err:
            raise refusal(err, body) from None


class ChatRequest(Request):
    """``POST /v1/chat/completions``: OpenAI's chat-completions request; typed are the fields the
    service reads and the sampling fields whose wrong type an upstream would refuse only after the
    clip's tools ran (``choices`` is ours); any other known field is checked by name only."""

    refused_extras: ClassVar[bool] = True
    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    choices: list[str] | None = Field(
        None, description="The answer choices (ours: the upstream reads them in the text, one per line)."
    )
    stream: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    n: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    seed: int | None = None
    top_k: int | None = None
    top_logprobs: int | None = None
    logprobs: bool | None = None
    stop: str | list[str] | None = None
    user: str | None = None
    tools: list[dict[str, Any]] | None = None

    list_caps: ClassVar[dict] = {"messages": MAX_MESSAGES, "choices": MAX_CHOICES}

    @classmethod
    def sized(cls, body) -> None:
        super().sized(body)
        messages = body.get("messages") if isinstance(body, dict) else None
        parts = 0
        for message in messages if isinstance(messages, list) else ():
            content = message.get("content") if isinstance(message, dict) else None
            parts += len(content) if isinstance(content, list) else 0
        if parts > MAX_PARTS:
            raise Invalid(f"messages have {parts} content parts in all, over the {MAX_PARTS}-part limit", "messages")

    @classmethod
    def known_extra(cls, name: str) -> bool:
        return name in sdk_fields() or name in VLLM_EXTRAS

    @model_validator(mode="after")
    def _model_named(self, info: ValidationInfo):
        if (info.context or {}).get("model_required") and not self.model:
            raise PydanticCustomError("model_required", "model is required (or start the service with --model)")
        return self


class SelectRequest(Request):
    """``POST /v1/select``: a clip (base64 and its format, or an ``audio_url``), a question and its
    choices; other fields are ignored, as today's clients may send a chat request's ``model``."""

    list_caps: ClassVar[dict] = {"choices": MAX_CHOICES}
    audio: str | None = Field(None, description="The clip's bytes in base64.")
    format: AudioFormat = "wav"
    audio_url: str | None = None
    question: str
    choices: list[str] | None = None
    explain: bool = False


class Invalid(BadRequest):
    """A body its model refuses: the message names the field's path, also given as ``param``."""

    def __init__(self, message: str, param: str | None):
        super().__init__(message)
        self.param = param


WANTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}
"""The type an error of pydantic's says a field should have, in the words of JSON."""


def json_type(value) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _path(body, loc: tuple, missing: bool) -> list:
    """The body's path to an error at ``loc``: pydantic's ``loc`` also names the union member tried
    (``str``, ``list[...]``, ``text part``), which the body does not have."""
    path, node = [], body
    for i, key in enumerate(loc):
        if isinstance(key, int) and isinstance(node, list) and 0 <= key < len(node):
            path.append(key)
            node = node[key]
        elif isinstance(node, dict) and (key in node or (missing and i == len(loc) - 1)):
            path.append(key)
            node = node.get(key)
    return path


def _written(path: list) -> str:
    return "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path).lstrip(".")


def refusal(err: ValidationError, body) -> Invalid:
    """The deepest of ``err``'s errors as one line (a union's members' errors at one place joined: ``stop
    must be a string or a list, got integer``), never pydantic's multi-line account."""
    found = [(_path(body, e["loc"], e["type"] == "missing"), e) for e in err.errors(include_url=False)]
    deepest = max(len(path) for path, _ in found)
    here = [e for path, e in found if len(path) == deepest]
    path = next(path for path, _ in found if len(path) == deepest)
    first = here[0]
    wanted = list(dict.fromkeys(WANTED[e["type"]] for e in here if e["type"] in WANTED))
    if wanted:
        phrase = f"must be {' or '.join(wanted)}, got {json_type(first['input'])}"
    elif first["type"] == "missing":
        phrase = "is required"
    elif first["type"] == "literal_error":
        phrase = f"must be one of {first['ctx']['expected']}, got {first['input']!r}"[:300]
    elif first["type"] == "too_short":
        least = first["ctx"]["min_length"]
        phrase = "must not be empty" if least == 1 else f"must have at least {least} items"
    elif first["type"] == "value_error":
        phrase = str(first["ctx"]["error"])
    else:
        phrase = first["msg"]
    written = _written(path)
    if written or wanted:  # at the top, a type error is the body's; the rest say what they are about
        return Invalid(f"{written or 'the request body'} {phrase}", written or None)
    return Invalid(phrase, None)


def _inlined(schema: dict) -> dict:
    """``schema`` with its ``$defs`` written where they are referred to: the OpenAPI document keeps
    its own definitions elsewhere (``components``), so a request body's schema must stand alone."""
    defs = schema.pop("$defs", {})

    def inline(node):
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return inline(schema)


ERROR = {
    "description": "An OpenAI-shaped error: {error: {message, type, param, code}}",
    "content": {"application/json": {"schema": _inlined(ErrorResponse.model_json_schema())}},
}


def openapi_body(model: type[BaseModel], *refusals: int) -> dict:
    """``openapi_extra`` for an endpoint taking ``model`` as its JSON body, refusing with ``refusals``.
    The body is not FastAPI's to parse (the service's reader refuses deep JSON and oversized bodies
    first): the schema is published, the model checks."""
    responses = {str(status): ERROR for status in (400, 401, 408, 413, 415, 429, *refusals)}
    schema = _inlined(model.model_json_schema())
    return {
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        "responses": responses,
    }

"""The OpenAI Realtime API's (GA) server events that ``/v1/realtime`` sends, shaped as the ``openai``
SDK's models read them (``openai.types.realtime``), and the client events it reads."""

from __future__ import annotations

import uuid

from ..reasoners.messages import MAX_TEXT_CHARS

CLIENT_EVENTS = (
    "session.update",
    "conversation.item.create",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "response.create",
)
"""What a client may send; any other type is answered with an ``error`` event."""


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def event(kind: str, **fields) -> dict:
    return {"type": kind, "event_id": new_id("event"), **fields}


def error(message: str, code: str, kind: str = "invalid_request_error", client_event_id=None, param=None) -> dict:
    """The Realtime API's ``error`` event: the session stays open."""
    return event(
        "error",
        error={"type": kind, "code": code, "message": message, "param": param, "event_id": client_event_id},
    )


def session_config(session_id: str, model: str, rate: int, instructions: str) -> dict:
    """The session as ``session.created`` and ``session.updated`` report it: text out, PCM16 in at
    ``rate``, no server VAD (the client commits the buffer)."""
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": model,
        "output_modalities": ["text"],
        "instructions": instructions,
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": rate}, "turn_detection": None}},
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": "inf",
    }


def user_item(item_id: str, content: list) -> dict:
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": content,
    }


def assistant_item(item_id: str, text: str | None, status: str) -> dict:
    content = [] if text is None else [{"type": "output_text", "text": text}]
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def response(response_id: str, status: str, output: list, extra: dict | None = None, details=None) -> dict:
    """A ``realtime.response``; ``extra`` carries our ``autagent`` block (an extra field the SDK keeps)."""
    return {
        "id": response_id,
        "object": "realtime.response",
        "status": status,
        "status_details": details,
        "output": output,
        "output_modalities": ["text"],
        "conversation_id": None,
        "usage": None,
        "metadata": None,
        **(extra or {}),
    }


def text_events(response_id: str, item_id: str, text: str) -> list[dict]:
    """The events of one text answer, from its item's arrival to its completion."""
    where = {"response_id": response_id, "item_id": item_id, "output_index": 0}
    return [
        event(
            "response.output_item.added",
            response_id=response_id,
            output_index=0,
            item=assistant_item(item_id, None, "in_progress"),
        ),
        event("response.content_part.added", **where, content_index=0, part={"type": "text", "text": ""}),
        event("response.output_text.delta", **where, content_index=0, delta=text),
        event("response.output_text.done", **where, content_index=0, text=text),
        event("response.content_part.done", **where, content_index=0, part={"type": "text", "text": text}),
        event(
            "response.output_item.done",
            response_id=response_id,
            output_index=0,
            item=assistant_item(item_id, text, "completed"),
        ),
    ]


class Invalid(ValueError):
    """A client event's field the service cannot take: the message and the Realtime error code."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def session_settings(session, rate: int, min_rate: int, max_rate: int) -> tuple[int, str | None]:
    """(the input rate, the instructions or None) a ``session.update``'s ``session`` sets; :class:`Invalid`
    for anything else than a realtime text session with 16-bit PCM input, whatever the fields' types
    (``output_modalities: 5`` or ``audio: [1]`` once raised past the handler)."""
    if not isinstance(session, dict) or session.get("type") != "realtime":
        raise Invalid("session.update needs session.type 'realtime'", "invalid_session")
    modalities = session.get("output_modalities")
    if modalities is not None and modalities != ["text"]:
        raise Invalid("this service answers in text only: output_modalities ['text']", "invalid_session")
    audio = session.get("audio") or {}
    audio_input = (audio.get("input") or {}) if isinstance(audio, dict) else None
    if not isinstance(audio_input, dict):
        raise Invalid("session.audio must be an object, and its input an object", "invalid_session")
    fmt = audio_input.get("format")
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type", "audio/pcm") != "audio/pcm":
            raise Invalid("the input audio format must be audio/pcm (16-bit mono)", "invalid_format")
        rate = fmt.get("rate", 24000)
        if not isinstance(rate, int) or not min_rate <= rate <= max_rate:
            raise Invalid(f"audio/pcm rate must be {min_rate} to {max_rate} Hz", "invalid_format")
    instructions = session.get("instructions")
    if isinstance(instructions, str) and len(instructions) > MAX_TEXT_CHARS:
        raise Invalid(
            f"session.instructions is {len(instructions)} characters, over the {MAX_TEXT_CHARS}-character limit",
            "invalid_session",
        )
    return rate, instructions if isinstance(instructions, str) else None

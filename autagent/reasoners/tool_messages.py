"""Chat messages when a model calls tools itself: the conversation's clip, the question asked now,
the records shown so far (ahead of the clip's message and in ``tool`` messages), and the ``tool``
message that carries one record back.

A conversation may hold several turns.  Its clip is the last user message that carries audio (the
*anchor*): the plugin selects for the anchor's question once, and its records go in front of the
anchor's text, where they stay for every later turn; the question being asked now is the last user
message's.  A ``tool`` message's content is the record as every reasoner is shown it
(:func:`autagent.reasoners.prompts.shown`: ``{"tool", "output"}``, plus ``"window"`` when the call
named one, or ``{"tool", "error"}``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .json_limits import loads
from .messages import BadRequest, audio_source, question_and_choices, split_records, store_audio, text_of
from .prompts import shown


@dataclass
class Conversation:
    """What a (possibly multi-turn) request holds."""

    anchor: int
    """Index of the message carrying the clip."""
    audio: str
    """The clip, stored by content ("" when it is a remote URL, in ``remote``)."""
    question: str
    """The question asked now (the last user message's)."""
    choices: tuple[str, ...]
    records: list[dict] = field(default_factory=list)
    """Every record shown so far, in the paper's shape (``presented``)."""
    called: list[str] = field(default_factory=list)
    """Tools the assistant asked for in this conversation, in order."""
    remote: str = ""


def _parts(message: dict) -> list:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return content
    raise BadRequest(f"message {message.get('role')!r}: content must be text or a list of content parts")


def has_audio(message) -> bool:
    return (
        isinstance(message, dict)
        and message.get("role") == "user"
        and isinstance(message.get("content"), list)
        and any(isinstance(p, dict) and p.get("type") in ("input_audio", "audio_url") for p in message["content"])
    )


def anchor_of(messages) -> int:
    """Index of the last user message that carries audio; BadRequest when none does."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    for index in range(len(messages) - 1, -1, -1):
        if has_audio(messages[index]):
            return index
    raise BadRequest("no audio: put the clip in a user message as input_audio or an audio_url data: URL")


def tool_message(call_id: str, record: dict) -> dict:
    """The ``tool`` message answering call ``call_id`` with ``record``."""
    if "error" in record:
        body = {"tool": record["tool"], "error": record["error"]}
    else:
        body = shown(record)
        if record.get("window"):
            body = {"tool": body["tool"], "window": record["window"], "output": body["output"]}
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(body, ensure_ascii=False)}


def shown_records(messages) -> list[dict]:
    """The records in the ``tool`` messages of ``messages`` (error records and foreign content left out)."""
    records = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "tool":
            continue
        try:
            body = loads(message.get("content") or "")
        except (TypeError, ValueError):
            continue
        if isinstance(body, dict) and isinstance(body.get("tool"), str) and "output" in body:
            records.append({"tool": body["tool"], "output": body["output"], "presented": True})
    return records


def called_tools(messages) -> list[str]:
    """Names of the functions assistant messages asked for, in order."""
    names = []
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                name = (call.get("function") or {}).get("name") if isinstance(call, dict) else None
                if isinstance(name, str):
                    names.append(name)
    return names


def read_conversation(messages, explicit_choices, audio_folder: Path, max_bytes: int) -> Conversation:
    """The clip, the question asked now and every record shown in a chat request."""
    anchor = anchor_of(messages)
    raw, fmt, url = audio_source(_parts(messages[anchor]))
    block, _ = split_records(text_of(_parts(messages[anchor])))
    users = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"]
    _, text = split_records(text_of(_parts(messages[users[-1]])))
    question, choices = question_and_choices(text, explicit_choices)
    if not question and not choices:
        raise BadRequest("the last user message has no question text")
    records = (block or []) + shown_records(messages[anchor + 1 :])
    audio = "" if url else str(store_audio(raw, fmt, audio_folder, max_bytes))
    return Conversation(anchor, audio, question, choices, records, called_tools(messages), url or "")

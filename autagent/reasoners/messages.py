"""OpenAI chat messages with a clip in them: read (the clip, the question, the choices and any tool
records shown) and written (the same messages with tool records added).

The clip is the last user message's OpenAI ``input_audio`` part (base64 + format) or vLLM's
``audio_url`` part with a ``data:`` URL.  The question and its choices come from that message's
text: choices as ``(A) ...`` lines (or ``A. ...``, ``A) ...``), on one line (``Choices: (A) hello
there (B) goodbye``), or one per line after a ``Choices:`` line; an explicit ``choices`` list wins.
Records are shown exactly as evaluation shows them to a reasoner
(:func:`autagent.reasoners.prompts.records_block`), ahead of the user's own text.

Anything malformed raises :class:`BadRequest` with a message fit for a 400 reply.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from tools.decoders import Refusal, check_declared

from .json_limits import TooDeep, loads
from .prompts import RECORDS_HEADER, format_choices, records_block

FORMATS = {"wav", "mp3", "flac", "ogg", "m4a", "webm"}
CHOICE_LABELS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
MAX_TEXT_CHARS = 65536
"""The longest question text (with its choices) read from a request: a question is a few hundred
characters; parsing is linear, but the text goes on to the encoders and the reasoner's prompt."""
MAX_CHOICES, MAX_CHOICE_CHARS = 64, 4096
"""The most choices a question has, however they are given (a list or lines of its text: 7,000 lines
once took 31.5 s under the reasoner's lock), and the longest one."""
MIME_FORMATS = {"x-wav": "wav", "wave": "wav", "mpeg": "mp3", "x-flac": "flac"}  # audio/<subtype> -> format
DATA_URL = re.compile(r"^data:audio/([\w.+-]+)(?:;[\w=.+-]+)*;base64,(.*)$", re.DOTALL)


def over_limit(size: int, max_bytes: int) -> str:
    """A clip over the size limit, naming the flag that raises it (the service's and MCP's --max-audio-mb)."""
    return (
        f"the audio is {size} bytes, over the {max_bytes}-byte limit (--max-audio-mb {max_bytes / 2**20:g} raises it)"
    )


class BadRequest(ValueError):
    """A request the service cannot serve, with the reason (an OpenAI-shaped 400)."""


@dataclass
class ChatQuery:
    """What one request asks: the clip (a file named by its content), the question, the choices, the
    records already shown in it (when a plugin service upstream added them)."""

    audio: str
    question: str
    choices: tuple[str, ...]
    records: list[dict] | None = None
    audio_bytes: int = 0
    remote: dict = field(default_factory=dict)
    seconds: float = 0.0
    """The clip's length, where the reader measured it (the service does)."""


def last_user_content(messages) -> list:
    """The content parts of the last user message (a string content is one text part)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise BadRequest("no user message")
    content = users[-1].get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        raise BadRequest("the last user message's content must be text or a list of content parts")
    return content


def audio_source(parts: list) -> tuple[bytes | None, str | None, str | None]:
    """(audio bytes, format, remote URL) from the content parts; BadRequest for a malformed part."""
    data, fmt, url = encoded_audio(parts)
    return (None, None, url) if url is not None else (decode_base64(data), fmt, None)


def encoded_audio(parts: list) -> tuple[object, str | None, str | None]:
    """(the clip's base64 text as sent, format, remote URL) from the content parts, not decoded yet;
    BadRequest for a malformed part."""
    for part in parts:
        kind = part.get("type")
        if kind == "input_audio":
            audio = _object(part, "input_audio")
            fmt = str(audio.get("format", "")).lower()
            if fmt not in FORMATS:
                raise BadRequest(f"input_audio.format must be one of {sorted(FORMATS)}, got {fmt!r}")
            return audio.get("data"), fmt, None
        if kind == "audio_url":
            url = str(_object(part, "audio_url").get("url", ""))
            match = DATA_URL.match(url)
            if match:
                fmt = MIME_FORMATS.get(match[1].lower(), match[1].lower())
                if fmt not in FORMATS:  # it names the stored file: only the formats we know
                    raise BadRequest(f"audio_url: data:audio/<format> must be one of {sorted(FORMATS)}")
                return match[2], fmt, None
            if url.startswith(("http://", "https://")):
                return None, None, url
            raise BadRequest(
                "audio_url must be a data: URL (or http(s) with --allow-remote-audio); files and paths are refused"
            )
    raise BadRequest("no audio: put the clip in the last user message as input_audio or an audio_url data: URL")


def _object(part: dict, name: str) -> dict:
    """The part's ``name`` object ({} when absent); BadRequest when it is anything but an object."""
    value = part.get(name) or {}
    if not isinstance(value, dict):
        raise BadRequest(f"{name} must be an object, got {type(value).__name__}")
    return value


def decode_base64(data) -> bytes:
    if not isinstance(data, str) or not data:
        raise BadRequest("the audio's base64 data is missing or empty")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("the audio's data is not valid base64") from None
    if not raw:
        raise BadRequest("the audio is empty")
    return raw


def store_audio(raw: bytes, fmt: str, folder: Path, max_bytes: int) -> Path:
    """The clip as a file named by its content (so every cache keyed by content applies)."""
    if len(raw) > max_bytes:
        raise BadRequest(over_limit(len(raw), max_bytes))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(raw).hexdigest()}.{fmt}"
    if not path.exists():  # a temporary file of its own: requests with the same clip may write at once
        import os
        import tempfile

        handle, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=f".{fmt}")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(raw)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def check_format(raw: bytes, fmt: str) -> None:
    """BadRequest when the clip's first bytes are a playlist or say another format than ``fmt`` (the
    format the request declared): a clip is decoded as what it is, and never names other files."""
    try:
        check_declared(raw[:64], fmt)
    except Refusal as refusal:
        raise BadRequest(f"the audio cannot be used: {refusal} ({refusal.code})") from None


def text_of(parts: list) -> str:
    return "\n".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")


def split_records(text: str) -> tuple[list[dict] | None, str]:
    """Records shown by :func:`with_records` (None if there are none) and the text after them."""
    if not text.startswith(RECORDS_HEADER):
        return None, text
    body = text[len(RECORDS_HEADER) :]
    first, _, rest = body.partition("\n")

    try:
        records = loads(first)
    except TooDeep as err:
        raise BadRequest(f"the tool records in the prompt are {err}") from None
    except ValueError:
        raise BadRequest("the tool records in the prompt are not valid JSON") from None
    if not isinstance(records, list):
        raise BadRequest("the tool records in the prompt must be a JSON list")
    return [dict(r, presented=True) for r in records if isinstance(r, dict)], rest.lstrip("\n")


def choice_line(line: str) -> tuple[str, str] | None:
    """``(label, text)`` of a choice line (``(A) x``, ``A) x``, ``A. x``, ``A: x``), else None.  String
    methods, not a regular expression: a lazy pattern over a long run of spaces took quadratic time
    (52 s for a 100 KB line, the GIL held all along)."""
    rest = line.lstrip()
    rest = rest[1:] if rest.startswith("(") else rest
    if len(rest) < 3 or rest[0] not in CHOICE_LABELS or rest[1] not in ").:":
        return None
    text = rest[2:].strip()
    return (rest[0], text) if text else None


def inline_choices(line: str) -> tuple[str, list[str]] | None:
    """``(the text before them, [choices])`` of choices written on one line (``Choices: (A) hello
    there (B) goodbye``: labels from (A) on, in order, at least two), else None; linear time."""
    start = line.find("(A)")
    if start < 0 or "(B)" not in line:
        return None
    head, found, label = line[:start], [], "A"
    while True:
        following = chr(ord(label) + 1)
        after = line.find(f"({following})", start + 3) if label != "Z" else -1
        found.append(line[start + 3 : after if after >= 0 else len(line)].strip())
        if after < 0:
            break
        start, label = after, following
    return (head, found) if len(found) >= 2 and all(found) else None


def _expanded(lines: list[str]) -> list[str]:
    """``lines`` with one line of inline choices (when no other line is a choice) written one per line."""
    inline = [(i, found) for i, line in enumerate(lines) if (found := inline_choices(line)) is not None]
    if len(inline) != 1 or any(choice_line(line) for j, line in enumerate(lines) if j != inline[0][0]):
        return lines
    i, (head, found) = inline[0]
    head = head.rstrip()
    if head.lower().endswith("choices:") and head.strip().lower() != "choices:":
        head = head[: -len("choices:")].rstrip()
    written = [f"({chr(ord('A') + k)}) {choice}" for k, choice in enumerate(found)]
    return [*lines[:i], *([head] if head.strip() else []), *written, *lines[i + 1 :]]


def check_text(text: str, name: str) -> None:
    """BadRequest naming ``name`` when ``text`` is over :data:`MAX_TEXT_CHARS`."""
    if len(text) > MAX_TEXT_CHARS:
        raise BadRequest(f"{name} is {len(text)} characters, over the {MAX_TEXT_CHARS}-character limit")


def check_choices(choices, name: str = "choices") -> None:
    """BadRequest naming ``name`` when there are more than :data:`MAX_CHOICES` choices or one is over
    :data:`MAX_CHOICE_CHARS` characters (a list, as a request or an MCP call gives it; the choices
    written in a text are counted by :func:`question_and_choices`, the text's length bounds theirs)."""
    if len(choices) > MAX_CHOICES or any(len(c) > MAX_CHOICE_CHARS for c in choices):
        raise BadRequest(
            f"{name}: {len(choices)} given; at most {MAX_CHOICES}, each at most {MAX_CHOICE_CHARS} characters"
        )


def question_and_choices(
    text: str, explicit=None, name: str = "the user message's text"
) -> tuple[str, tuple[str, ...]]:
    """The question and the choices written in ``text`` (or given as ``explicit``); BadRequest naming
    ``name`` (the field the text came from) when it is too long; linear time in its length."""
    check_text(text, name)
    lines = _expanded([line.rstrip() for line in text.strip().splitlines()])
    labelled = [(i, choice_line(line)) for i, line in enumerate(lines)]
    labelled = [(i, m) for i, m in labelled if m]
    header = next((i for i, line in enumerate(lines) if line.strip().lower().rstrip(":") == "choices"), None)
    if explicit is not None:
        if not isinstance(explicit, list) or not all(isinstance(c, str) and c.strip() for c in explicit):
            raise BadRequest("choices must be a list of non-empty strings")
        check_choices(explicit, "choices")
        choices, end = tuple(explicit), header if header is not None else (labelled[0][0] if labelled else len(lines))
    elif labelled:
        choices, end = tuple(m[1] for _, m in labelled), min(i for i, _ in labelled)
        end = header if header is not None and header < end else end
    elif header is not None:
        choices = tuple(line.strip().lstrip("-*• ").strip() for line in lines[header + 1 :] if line.strip())
        end = header
    else:
        choices, end = (), len(lines)
    if explicit is None and len(choices) > MAX_CHOICES:  # their length is the text's, bounded above
        raise BadRequest(f"{name} lists {len(choices)} choices, over the {MAX_CHOICES}-choice limit")
    question = " ".join(line.strip() for line in lines[:end] if line.strip())
    question = re.sub(r"^question:\s*", "", question, flags=re.IGNORECASE)
    if len(set(choices)) != len(choices):
        raise BadRequest("the choices repeat one another")
    return question, choices


def read_query(messages, explicit_choices, audio_folder: Path, max_bytes: int, store=None, known=None) -> ChatQuery:
    """The clip, question, choices and shown records of a chat request; remote audio is returned as a
    URL in ``remote`` for the caller to fetch (or refuse).  ``store(raw, fmt)`` writes the clip (and,
    in a service, holds it in its bounded folder); by default it is written to ``audio_folder``.
    ``known(data, fmt)``: the ``(path, bytes)`` of a clip stored before from the same base64 text (a
    service's memo), or None; a known clip is neither decoded nor stored again (the caller holds it)."""
    parts = last_user_content(messages)
    data, fmt, url = encoded_audio(parts)
    held = known(data, fmt) if known is not None and isinstance(data, str) else None
    raw = decode_base64(data) if url is None and held is None else None
    records, text = split_records(text_of(parts))
    question, choices = question_and_choices(text, explicit_choices)
    if not question and not choices:
        raise BadRequest("the last user message has no question text")
    if url is not None:
        return ChatQuery("", question, choices, records, remote={"url": url})
    if held is not None:
        return ChatQuery(str(held[0]), question, choices, records, audio_bytes=held[1])
    if len(raw) > max_bytes:
        raise BadRequest(over_limit(len(raw), max_bytes))
    check_format(raw, fmt)
    path = store(raw, fmt) if store is not None else store_audio(raw, fmt, audio_folder, max_bytes)
    return ChatQuery(str(path), question, choices, records, audio_bytes=len(raw))


def with_records(messages: list, records: list[dict], index: int | None = None) -> list:
    """A copy of ``messages`` whose last user message's text (message ``index``'s, when given) starts
    with the records, shown exactly as evaluation shows them to a reasoner; the clip and everything
    else are unchanged."""
    out = copy.deepcopy(messages)
    if index is not None:
        user = out[index]
    else:
        user = next(m for m in reversed(out) if isinstance(m, dict) and m.get("role") == "user")
    block = records_block(records)
    if isinstance(user.get("content"), str):
        user["content"] = block + user["content"]
        return out
    texts = [p for p in user["content"] if p.get("type") == "text"]
    if texts:
        texts[0]["text"] = block + str(texts[0].get("text", ""))
    else:
        user["content"].append({"type": "text", "text": block})
    return out


def with_choices(messages: list, choices) -> list:
    """``messages`` whose last user message's text lists ``choices`` one per line after its question
    (``(A) ...`` lines: the README's first form, as the prompts write them), for a model that reads only
    the text; unchanged when the text lists them already, and its own different choices replaced (the
    list wins, as it does for selection).  A copy when changed; the records shown and the clip kept."""
    try:
        full = text_of(last_user_content(messages))
        _, text = split_records(full)
        question, written = question_and_choices(text)
    except BadRequest:
        return messages
    if list(written) == list(choices):
        return messages
    out = copy.deepcopy(messages)
    user = next(m for m in reversed(out) if isinstance(m, dict) and m.get("role") == "user")
    lines = format_choices(choices)
    if not written:  # after whatever the text says, its last text part
        if isinstance(user.get("content"), str):
            user["content"] = user["content"].rstrip("\n") + "\n" + lines
            return out
        texts = [p for p in user["content"] if p.get("type") == "text"]
        if texts:
            texts[-1]["text"] = str(texts[-1].get("text", "")).rstrip("\n") + "\n" + lines
        else:
            user["content"].append({"type": "text", "text": lines})
        return out
    shown = full[: len(full) - len(text)] + (f"{question}\n" if question else "") + lines  # records kept
    if isinstance(user.get("content"), str):
        user["content"] = shown
    else:  # its text parts become one, where the first was
        first = next(i for i, p in enumerate(user["content"]) if p.get("type") == "text")
        user["content"] = [
            {"type": "text", "text": shown} if i == first else p
            for i, p in enumerate(user["content"])
            if i == first or p.get("type") != "text"
        ]
    return out

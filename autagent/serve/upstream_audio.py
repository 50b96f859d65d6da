"""The clip as the upstream takes it: at the rate its audio model reads (``--upstream-sample-rate``,
Qwen2-Audio's 16 kHz; vLLM's CPU build cannot resample a clip itself, having no torchaudio for its
torch, and a smaller clip travels faster), or left out (``--upstream-audio drop``: a text-only model
reads the tool records and the user's text, the cascaded voice agent).

Every clip part of every message (``input_audio``, ``audio_url``), not only the one the plugin reads,
passes one policy before it goes upstream (:class:`AudioPolicy`, the bounds the request's own clip
passes; issue 62): its bytes under ``--max-audio-mb``; a clip of the format it declares, never a
playlist; its length under ``--max-audio-seconds``, read from its header before anything is decoded
where it has one, else decoded at most that + 1 s (an hour of silence in an 89 KB FLAC once decoded
whole to 976 MiB); an http(s) ``audio_url`` refused unless ``--allow-remote-audio``, and then fetched
by the service itself under the remote-audio policy (:mod:`.remote`: public hosts only, a size cap, a
deadline) and sent on as a data: URL, so that the upstream never fetches a URL a client chose; any
other URL (``file:``...) refused.  A clip already at the rate, mono 16-bit WAV, goes unchanged.

The request's own clip, which the service has read already (decoded from base64 once, checked against
these very bounds and stored: :class:`.chat_call.ReadClip`), is recognised wherever the messages hold
it (its base64 text, or the URL it was fetched from) and re-encoded from the stored file, never decoded
from base64, copied, checked or fetched again; what it became at the upstream's rate is remembered by
its content (:class:`Converted`: a conversation sends its clip with every turn).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import io
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tools.audio import AudioError, decode
from tools.decoders import Refusal, check_declared
from tools.memo import BoundedMemo

from ..reasoners.messages import DATA_URL, FORMATS, MIME_FORMATS, BadRequest
from .remote import MIB, fetch, format_of, too_big

if TYPE_CHECKING:
    from .chat_call import ReadClip

AUDIO_PARTS = ("input_audio", "audio_url")


@dataclass(frozen=True)
class AudioPolicy:
    """What every clip bound for the upstream must pass, in whichever message it is (the service's
    settings: :meth:`of`)."""

    max_bytes: int = 25 * MIB
    """A clip's bytes at most (``--max-audio-mb``)."""
    max_seconds: float = 30.0
    """A clip's length at most (``--max-audio-seconds``, by default ``tools.max_seconds``)."""
    allow_remote: bool = False
    """Fetch an http(s) ``audio_url`` and send it on as a data: URL (``--allow-remote-audio``); else refused."""
    allow_private_hosts: bool = False
    """Fetch from private, loopback or link-local addresses too (``--allow-private-audio-hosts``)."""
    remote_timeout_s: float = 30.0
    """A remote clip fetched whole within this many seconds (``--remote-timeout-s``)."""

    @classmethod
    def of(cls, options, tools_max_seconds: float) -> AudioPolicy:
        """The policy of a service started with ``options`` (:class:`.options.ServeOptions`)."""
        return cls(
            options.max_audio_bytes,
            options.max_audio_seconds or tools_max_seconds,
            options.allow_remote_audio,
            options.allow_private_audio_hosts,
            options.remote_timeout_s,
        )


class Converted(BoundedMemo):
    """The request clips as the upstream was sent them, by the stored clip's name (its content's hash
    and format) and the rate: the re-encoded WAV's base64, or None where it went as it came.  At most
    ``max_items`` clips and ``max_bytes`` of base64 (a 30 s clip at 16 kHz is 1.3 MB), the least
    recently used dropped."""

    def __init__(self, max_items: int = 256, max_bytes: int = 64 * MIB):
        super().__init__(max_items, max_bytes, size=lambda held: len(held[0] or ""))


def too_long(seconds: float, limit: float) -> str:
    return f"the audio is {seconds:.1f} s, longer than {limit:g} s (--max-audio-seconds raises it)"


def has_audio(messages) -> bool:
    """Whether any message holds a clip part (cheap: the messages are not copied)."""
    return any(
        isinstance(m, dict)
        and isinstance(m.get("content"), list)
        and any(isinstance(p, dict) and p.get("type") in AUDIO_PARTS for p in m["content"])
        for m in messages
    )


def clip_parts(messages: list):
    """``(where, part)`` of every clip part of every message (``where``: ``messages[i].content[j]``)."""
    for i, message in enumerate(messages):
        parts = message.get("content") if isinstance(message, dict) else None
        for j, part in enumerate(parts if isinstance(parts, list) else ()):
            if isinstance(part, dict) and part.get("type") in AUDIO_PARTS:
                yield f"messages[{i}].content[{j}]", part


async def upstream_messages(
    messages: list, mode: str, rate: int, policy: AudioPolicy, read: ReadClip | None = None, memo=None
) -> list:
    """:func:`for_upstream` of ``messages``, their remote clips fetched first by the service (when the
    policy allows remote audio; refused otherwise) and put in as data: URLs; the request's clip
    ``read`` by the service is not fetched again."""
    out = copy.deepcopy(messages)
    if mode != "drop":
        for where, part in clip_parts(out):
            url = _remote(part)
            if url is None or (read is not None and read.sent_as(None, "", url)):
                continue
            if not policy.allow_remote:
                raise BadRequest(
                    f"{where}: remote audio URLs are refused (start the service with --allow-remote-audio)"
                )
            raw = await fetch(url, policy.max_bytes, policy.allow_private_hosts, timeout_s=policy.remote_timeout_s)
            fmt = format_of(url, raw)
            part["audio_url"] = {
                **part["audio_url"],
                "url": f"data:audio/{fmt};base64,{base64.b64encode(raw).decode()}",
            }
    if mode == "drop" or _ready(out, rate, read, memo):  # nothing to decode
        return for_upstream(out, mode, rate, policy, False, read, memo)
    return await asyncio.to_thread(for_upstream, out, mode, rate, policy, False, read, memo)


def _remote(part: dict) -> str | None:
    holder = part.get("audio_url") if part.get("type") == "audio_url" else None
    url = holder.get("url") if isinstance(holder, dict) else None
    return url if isinstance(url, str) and url.lower().startswith(("http://", "https://")) else None


def for_upstream(
    messages: list,
    mode: str,
    rate: int,
    policy: AudioPolicy | None = None,
    copied: bool = True,
    read: ReadClip | None = None,
    memo: Converted | None = None,
) -> list:
    """A copy of ``messages`` (``copied``: a copy is made; else changed in place) whose clips pass
    ``policy`` and are re-encoded at ``rate`` (``mode`` send; ``rate`` 0: as they came) or removed
    (``mode`` drop; a message left with text parts only gets them as one string).  A clip that does not
    pass is a :class:`BadRequest` naming where it is and why.  The clip the service ``read`` is
    re-encoded from its stored file (remembered in ``memo``), wherever the messages hold it."""
    policy = policy or AudioPolicy()
    out = copy.deepcopy(messages) if copied else messages
    if mode != "drop":
        for where, part in clip_parts(out):
            _send_part(where, part, rate, policy, read, memo)
        return out
    for message in out:
        parts = message.get("content") if isinstance(message, dict) else None
        if isinstance(parts, list):
            kept = [p for p in parts if not (isinstance(p, dict) and p.get("type") in AUDIO_PARTS)]
            texts = [p for p in kept if isinstance(p, dict) and p.get("type") == "text"]
            message["content"] = "\n".join(str(p.get("text", "")) for p in texts) if len(texts) == len(kept) else kept
    return out


def _source(part: dict) -> tuple[dict, object, str, str | None]:
    """(the object holding the clip, its base64 text, its format, its remote URL) of a clip part, as
    sent: the text None for an ``audio_url`` that is not a data: URL."""
    if part["type"] == "input_audio":
        holder = part.get("input_audio")
        holder = holder if isinstance(holder, dict) else {}
        return holder, holder.get("data"), str(holder.get("format", "")).lower(), None
    holder = part.get("audio_url")
    holder = holder if isinstance(holder, dict) else {}
    url = holder.get("url")
    match = DATA_URL.match(url) if isinstance(url, str) else None
    if match is None:
        return holder, None, "", _remote(part)
    return holder, match[2], MIME_FORMATS.get(match[1].lower(), match[1].lower()), None


def _ready(messages: list, rate: int, read: ReadClip | None, memo) -> bool:
    """Whether every clip of ``messages`` is the clip the service ``read``, converted before: nothing to
    decode, so no worker thread (a hop costs more than looking it up)."""
    if read is None or memo is None or (Path(read.path).name, rate) not in memo:
        return False
    return all(read.sent_as(*_source(part)[1:]) for _, part in clip_parts(messages))


def _send_part(where: str, part: dict, rate: int, policy: AudioPolicy, read: ReadClip | None = None, memo=None) -> None:
    """The clip part checked against ``policy``, and re-encoded at ``rate`` where it is not so already
    (the clip the service ``read``: from its stored file, unchecked)."""
    holder, data, fmt, url = _source(part)
    if read is not None and read.sent_as(data, fmt, url):
        _send_read(part, holder, rate, policy, read, memo, remote=url is not None)
        return
    if part["type"] == "audio_url" and data is None:
        if url is not None:
            raise BadRequest(f"{where}: remote audio URLs are refused (start the service with --allow-remote-audio)")
        raise BadRequest(f"{where}: audio_url must be a data: URL (or http(s) with --allow-remote-audio)")
    if fmt not in FORMATS:
        raise BadRequest(f"{where}: the audio's format must be one of {sorted(FORMATS)}, got {fmt[:20]!r}")
    _put(part, holder, _checked(where, data, fmt, rate, policy))


def _put(part: dict, holder: dict, wav: str | None) -> None:
    """The part holding ``wav`` (the base64 of a WAV), or left as it is (None)."""
    if wav is None:
        return
    if part["type"] == "input_audio":
        part["input_audio"] = {**holder, "data": wav, "format": "wav"}
    else:
        part["audio_url"] = {**holder, "url": f"data:audio/wav;base64,{wav}"}


def _send_read(part: dict, holder: dict, rate: int, policy: AudioPolicy, read: ReadClip, memo, remote=False) -> None:
    """The part holding the service's ``read`` clip, re-encoded at ``rate`` from its stored file (what
    it became remembered in ``memo`` by its content); a remote one left as it came is sent as a data: URL
    of the stored bytes (the upstream never fetches a URL a client chose)."""
    key = (Path(read.path).name, rate)
    held = memo.get(key) if memo is not None else None
    if held is None:
        held = (_at_rate("the request's clip", read.path, rate, policy),)
        if memo is not None:
            memo[key] = held
    if held[0] is None and remote:
        raw = Path(read.path).read_bytes()
        holder["url"] = f"data:audio/{read.fmt};base64,{base64.b64encode(raw).decode()}"
    _put(part, holder, held[0])


def _checked(where: str, data, fmt: str, rate: int, policy: AudioPolicy) -> str | None:
    """The base64 clip as mono 16-bit WAV at ``rate``, or None to send it as it came (already so, or
    ``rate`` 0), once it passes ``policy``: bytes, format, then length, from the header before decoding
    where there is one, the decoding itself capped at the length allowed + 1 s."""
    try:
        raw = base64.b64decode(data, validate=True) if isinstance(data, str) else b""
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: the audio's data is not valid base64") from None
    if not raw:
        raise BadRequest(f"{where}: the audio is empty")
    if len(raw) > policy.max_bytes:
        raise BadRequest(f"{where}: {too_big(len(raw), policy.max_bytes)}")
    try:
        check_declared(raw[:64], fmt)
    except Refusal as refusal:
        raise BadRequest(f"{where}: the audio cannot be used: {refusal} ({refusal.code})") from None
    with _private_copy(raw, fmt) as path:
        return _at_rate(where, path, rate, policy)


def _at_rate(where: str, path: str, rate: int, policy: AudioPolicy) -> str | None:
    """The clip file at ``path`` as :func:`_checked` gives it: its length under ``policy``'s, from the
    header where there is one, else from the decoding capped at that + 1 s."""
    header = _header(path)
    if header is not None:
        frames, native, channels, kind = header
        if frames / native > policy.max_seconds:  # refused before a sample is decoded
            raise BadRequest(f"{where}: {too_long(frames / native, policy.max_seconds)}")
        if not rate or (native, channels, kind) == (rate, 1, ("WAV", "PCM_16")):
            return None
    try:
        samples, native = decode(path, policy.max_seconds + 1.0, mono=True)
    except AudioError as err:
        raise BadRequest(f"{where}: the audio cannot be used: {err.reason} ({err.code})") from None
    mono = samples[0]
    if len(mono) > policy.max_seconds * native + 1:
        raise BadRequest(f"{where}: {too_long(len(mono) / native, policy.max_seconds)}")
    return _wav(mono, native, rate) if rate else None


@contextmanager
def _private_copy(raw: bytes, fmt: str):
    """The clip's bytes in a temporary file of this process's (mode 0600), deleted after: the decoders
    read a file."""
    with tempfile.NamedTemporaryFile(prefix="autagent-upstream-", suffix=f".{fmt}") as handle:
        handle.write(raw)
        handle.flush()
        yield handle.name


def _header(path: str) -> tuple[int, int, int, tuple[str, str]] | None:
    """(frames, rate, channels, (format, subtype)) from the clip's header, read by libsndfile without
    decoding; None where it has no header libsndfile reads (m4a, webm) or states no length."""
    import soundfile as sf

    try:
        info = sf.info(path)
    except Exception:  # noqa: BLE001 - no header libsndfile reads: the capped decoding decides
        return None
    if info.frames <= 0 or info.samplerate <= 0 or info.channels <= 0:
        return None
    return int(info.frames), int(info.samplerate), int(info.channels), (info.format, info.subtype)


def _wav(mono, native: int, rate: int) -> str:
    import numpy as np
    import soundfile as sf

    if native != rate:
        import librosa

        mono = librosa.resample(mono, orig_sr=native, target_sr=rate, res_type="soxr_hq")
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(mono, -1.0, 1.0), rate, format="WAV", subtype="PCM_16")
    return base64.b64encode(buffer.getvalue()).decode()

"""The clip as the upstream takes it: at the rate its audio model reads (``--upstream-sample-rate``,
Qwen2-Audio's 16 kHz; vLLM's CPU build cannot resample a clip itself, having no torchaudio for its
torch, and a smaller clip travels faster), or left out (``--upstream-audio drop``: a text-only model
reads the tool records and the user's text, the cascaded voice agent).

Every clip part of every message is handled (``input_audio``, an ``audio_url`` data: URL); a clip
already at the rate, mono 16-bit WAV, goes unchanged; one that cannot be decoded goes unchanged too
(the upstream answers for it, as it would without us); a remote ``audio_url`` goes as it is, or is
dropped.
"""

from __future__ import annotations

import base64
import binascii
import copy
import io

from tools.decoders import BLOCK_FRAMES, mixer

from ..reasoners.messages import DATA_URL

AUDIO_PARTS = ("input_audio", "audio_url")


def has_audio(messages) -> bool:
    """Whether any message holds a clip part (cheap: the messages are not copied)."""
    return any(
        isinstance(m, dict)
        and isinstance(m.get("content"), list)
        and any(isinstance(p, dict) and p.get("type") in AUDIO_PARTS for p in m["content"])
        for m in messages
    )


def for_upstream(messages: list, mode: str, rate: int) -> list:
    """A copy of ``messages`` whose clips are re-encoded at ``rate`` (``mode`` send; ``rate`` 0: as they
    came) or removed (``mode`` drop; a message left with text parts only gets them as one string)."""
    out = copy.deepcopy(messages)
    for message in out:
        parts = message.get("content") if isinstance(message, dict) else None
        if not isinstance(parts, list):
            continue
        if mode == "drop":
            kept = [p for p in parts if not (isinstance(p, dict) and p.get("type") in AUDIO_PARTS)]
            texts = [p for p in kept if isinstance(p, dict) and p.get("type") == "text"]
            message["content"] = "\n".join(str(p.get("text", "")) for p in texts) if len(texts) == len(kept) else kept
        elif rate:
            for part in parts:
                if isinstance(part, dict) and part.get("type") in AUDIO_PARTS:
                    _resample_part(part, rate)
    return out


def _resample_part(part: dict, rate: int) -> None:
    if part["type"] == "input_audio":
        holder = part.get("input_audio")
        data = holder.get("data") if isinstance(holder, dict) else None
        wav = _at_rate(data, rate)
        if wav is not None:
            part["input_audio"] = {**holder, "data": wav, "format": "wav"}
        return
    holder = part.get("audio_url")
    url = holder.get("url") if isinstance(holder, dict) else None
    match = DATA_URL.match(url) if isinstance(url, str) else None
    wav = _at_rate(match[2], rate) if match else None
    if wav is not None:
        part["audio_url"] = {**holder, "url": f"data:audio/wav;base64,{wav}"}


def _at_rate(data, rate: int) -> str | None:
    """The base64 clip as mono 16-bit WAV at ``rate``, or None to leave it as it came (already so, or
    not decodable here)."""
    import numpy as np
    import soundfile as sf

    try:
        raw = base64.b64decode(data, validate=True)
        with sf.SoundFile(io.BytesIO(raw)) as handle:
            if (handle.samplerate, handle.channels, handle.format, handle.subtype) == (rate, 1, "WAV", "PCM_16"):
                return None
            add, result = mixer(-1, True)  # averaged block by block: one channel's memory, not all
            for block in handle.blocks(BLOCK_FRAMES, dtype="float32", always_2d=True):
                add(block)
            mono, native = result()[0], handle.samplerate
    except (binascii.Error, ValueError, TypeError, RuntimeError, sf.LibsndfileError):
        return None
    if native != rate:
        import librosa

        mono = librosa.resample(mono, orig_sr=native, target_sr=rate, res_type="soxr_hq")
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(mono, -1.0, 1.0), rate, format="WAV", subtype="PCM_16")
    return base64.b64encode(buffer.getvalue()).decode()

"""Guards of the service's limits (``make mutate-guards`` mutates autagent/serve/limits.py): a body at
its limit is read and one byte over is refused, a clip's length comes from its header, the clips folder
stays under its size deleting the least recently used clip a request does not hold, and the sent-clips
memo is keyed by the text it was sent as."""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import pytest
import soundfile as sf

from autagent.serve.limits import (
    INLINE_JSON_BYTES,
    AudioStore,
    Refused,
    SentClips,
    body_limit,
    clip_seconds,
    read_json,
)
from tools.audio import AudioError
from tools.decoders import sniff


class Request:
    """What read_json reads of a Starlette request: its headers and its body in chunks."""

    def __init__(self, body: bytes, declared: int | None = None, chunk: int = 3):
        self.body, self.chunk = body, chunk
        self.headers = {} if declared is None else {"content-length": str(declared)}
        self.streamed = 0

    async def stream(self):
        for start in range(0, len(self.body), self.chunk):
            self.streamed += 1
            yield self.body[start : start + self.chunk]


def read(body: bytes, max_bytes: int, declared: int | None = None, chunk: int = 3):
    return asyncio.run(read_json(Request(body, declared, chunk), max_bytes))


def test_a_body_at_its_limit_is_read_and_one_byte_over_is_refused():
    body = b'{"a": 1}'
    assert read(body, len(body), declared=len(body)) == {"a": 1}
    with pytest.raises(Refused) as refused:
        read(body, len(body) - 1)  # no declared length: refused as the bytes arrive
    assert refused.value.status == 413 and f"over the {len(body) - 1}-byte limit (it follows --max-audio-mb" in str(
        refused.value
    )
    request = Request(body, declared=len(body) + 1)
    with pytest.raises(Refused):
        asyncio.run(read_json(request, len(body)))
    assert request.streamed == 0  # a declared length over the limit: nothing read
    assert read(body, 100, declared=None) == {"a": 1} and read(body, 100, declared=10**9 // 10**9) == {"a": 1}


def test_a_body_that_is_not_a_json_object_is_a_400_and_a_large_one_parses_the_same():
    for body, message in [(b"{nope", "not JSON"), (b"[1, 2]", "must be a JSON object")]:
        with pytest.raises(Refused, match=message) as refused:
            read(body, 100)
        assert refused.value.status == 400 and refused.value.kind == "invalid_request_error"
    large = b'{"audio": "' + b"A" * INLINE_JSON_BYTES + b'"}'
    assert read(large, len(large), chunk=1 << 16)["audio"] == "A" * INLINE_JSON_BYTES


def test_the_body_limit_holds_a_clip_in_base64_and_a_mebibyte_more():
    assert body_limit(3) == 4 + (1 << 20) and body_limit(4) == 8 + (1 << 20) and body_limit(0) == 1 << 20
    assert sniff(b"fLaC") == "flac" and sniff(b"\xff\xfb..") == "mp3" and sniff(b"??") is None
    assert sniff(b"ID3") == "mp3" and sniff(b"OggS") == "ogg" and sniff(b"RIFF\0\0\0\0WAVE") == "wav"
    assert sniff(b"RIFF") is None  # a RIFF that is not WAVE says nothing


def _wav(path, seconds: float, rate: int = 8000, level: float = 0.1):
    t = np.arange(int(seconds * rate)) / rate
    sf.write(str(path), (level * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate)
    return path


def test_a_clips_length_comes_from_its_header_and_silence_or_nan_is_refused(tmp_path):
    assert clip_seconds(_wav(tmp_path / "a.wav", 2.0), 5.0) == pytest.approx(2.0)
    assert clip_seconds(_wav(tmp_path / "b.wav", 5.0), 5.0) == pytest.approx(5.0)  # at the limit: checked
    assert clip_seconds(_wav(tmp_path / "long.wav", 6.0, level=0.0), 5.0) == pytest.approx(6.0)  # over: not read
    with pytest.raises(AudioError, match="silent"):
        clip_seconds(_wav(tmp_path / "quiet.wav", 1.0, level=0.0), 5.0)
    nan = np.full(800, np.nan, dtype=np.float32)
    sf.write(str(tmp_path / "nan.wav"), nan, 8000, subtype="FLOAT")
    with pytest.raises(AudioError, match="NaN"):
        clip_seconds(tmp_path / "nan.wav", 5.0)
    # (a clip with no header libsndfile reads is decoded instead: tests/serve/test_serve_hardening.py; 20 s here)


def _clip(store: AudioStore, n: int, size: int = 10):
    path = store.hold(bytes([n]) * size, "wav")
    return path


def test_the_clips_folder_stays_under_its_size_least_recently_used_first_never_a_held_clip(tmp_path):
    store = AudioStore(tmp_path / "clips", 30)
    a, b, c = (_clip(store, n) for n in (1, 2, 3))
    assert store.size == 30 and all(p.exists() for p in (a, b, c))  # exactly at the limit: nothing deleted
    for p in (a, b, c):
        store.release(p)
    assert store.retake(a)  # a is now the most recent
    store.release(a)
    d = _clip(store, 4)  # 40 bytes while held: a folder is trimmed when a clip is let go
    assert b.exists() and store.size == 40
    store.release(d)
    assert not b.exists() and a.exists() and c.exists() and store.size == 30 and store.deleted == 1
    assert not store.retake(b)  # deleted: gone from the folder's books
    held = store.hold(b"\x05" * 25, "wav")
    e = _clip(store, 6, size=1)
    store.release(e)  # 56 bytes: c, a, d go (oldest first), the held clip stays, e is reached under 30
    assert held.exists() and e.exists() and not any(p.exists() for p in (a, c, d)) and store.size == 26
    store.release(held, drop=True)  # refused: deleted on release
    assert not held.exists() and store.size == 1


def test_a_dropped_clip_another_request_holds_stays_and_leases_count_as_recent(tmp_path):
    store = AudioStore(tmp_path / "clips", 100)
    a = _clip(store, 1)
    assert store.retake(a)  # a second request holds it too
    store.release(a, drop=True)
    assert a.exists() and store.size == 10
    store.release(a, drop=True)
    assert not a.exists() and store.size == 0 and store.deleted == 1
    b, c = _clip(store, 2), _clip(store, 3)
    store.release(b), store.release(c)
    with store.lease(b):
        assert b.exists()
    assert list(store._files) == [c, b]  # the lease made b the most recent
    store.max_bytes = 11  # one clip must go: the least recent
    store.release(store.hold(b"\x07", "wav"))
    assert b.exists() and not c.exists()


def test_clips_already_in_the_folder_count_from_the_start_oldest_first(tmp_path):
    folder = tmp_path / "clips"
    folder.mkdir()
    for k, name in enumerate(("old.wav", "mid.wav", "new.wav")):
        (folder / name).write_bytes(b"x" * 10)
        os.utime(folder / name, (time.time() - 100 + k, time.time() - 100 + k))
    (folder / "sub").mkdir()
    store = AudioStore(folder, 20)
    assert store.size == 20 and not (folder / "old.wav").exists() and (folder / "new.wav").exists()
    assert AudioStore(tmp_path / "absent", 5).size == 0


def test_sent_clips_are_keyed_by_their_text_and_format_and_bounded():
    clips = SentClips(max_items=2)
    key = SentClips.key("QUJD", "wav")
    assert key.endswith(".wav") and key != SentClips.key("QUJD", "mp3") and SentClips.key("é", "wav") is None
    assert clips.get(key) is None
    clips.put(key, "/clips/a.wav", 3, 1.5)
    assert clips.get(key) == ("/clips/a.wav", 3, 1.5)
    clips.put("k2", "b", 1, 1.0)
    clips.put("k3", "c", 1, 1.0)
    assert clips.get(key) is None and clips.get("k3") == ("c", 1, 1.0)


def test_a_refusal_keeps_its_headers():
    assert Refused(429, "busy", "rate_limit", {"Retry-After": "1"}).headers == {"Retry-After": "1"}
    assert Refused(400, "bad", "invalid_request_error").headers == {}


def test_a_silent_clip_at_exactly_the_limit_is_checked_and_one_bad_sample_refuses_a_clip(tmp_path):
    with pytest.raises(AudioError, match="silent"):
        clip_seconds(_wav(tmp_path / "quiet.wav", 5.0, level=0.0), 5.0)
    samples = (0.1 * np.ones(800)).astype(np.float32)
    samples[400] = np.inf
    sf.write(str(tmp_path / "inf.wav"), samples, 8000, subtype="FLOAT")
    with pytest.raises(AudioError, match="NaN or infinity"):
        clip_seconds(tmp_path / "inf.wav", 5.0)
    square = np.tile(np.array([0.5, -0.5], dtype=np.float32), 4000)  # zero mean over time: not silent
    sf.write(str(tmp_path / "square.wav"), square, 8000)
    assert clip_seconds(tmp_path / "square.wav", 5.0) == pytest.approx(1.0)
    sf.write(str(tmp_path / "empty.wav"), np.zeros(0, dtype=np.float32), 8000)
    with pytest.raises(AudioError, match="no audio samples"):  # no frames: decoded, not read as silence
        clip_seconds(tmp_path / "empty.wav", 5.0)


def test_a_clip_without_a_header_libsndfile_reads_is_decoded_up_to_a_second_past_the_limit(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import tools.audio

    def unreadable(path):
        raise RuntimeError("Format not recognised")

    asked = []

    def decode(path, rate, max_seconds):
        asked.append((rate, max_seconds))
        return SimpleNamespace(duration=2.5)

    monkeypatch.setattr(sf, "info", unreadable)
    monkeypatch.setattr(tools.audio, "load_audio", decode)
    (tmp_path / "clip.m4a").write_bytes(b"....ftypM4A ")
    assert clip_seconds(tmp_path / "clip.m4a", 5.0) == 2.5 and asked == [(None, 6.0)]


def test_the_folder_forgets_a_clip_deleted_under_it_and_a_missing_clip_weighs_nothing(tmp_path):
    store = AudioStore(tmp_path / "clips", 100)
    a = _clip(store, 1)
    store.release(a)
    a.unlink()  # deleted by hand while the service runs
    assert not store.retake(a)
    b = _clip(store, 2)
    b.unlink()
    store.release(b, drop=True)  # already gone: no error
    assert b not in store._files
    with store.lease(tmp_path / "clips" / "never.wav"):
        assert store.size == 10  # a's 10 bytes stay booked until trimmed; the missing clip adds none


def test_the_services_sent_clips_memo_holds_4096_clips():
    """The service builds ``SentClips()``: its default is the service's bound on remembered clips."""
    assert SentClips().memo.max_items == 4096

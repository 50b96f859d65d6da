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
    Arriving,
    AudioStore,
    Refused,
    SentClips,
    WholeBody,
    body_limit,
    body_too_big,
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


def read(body: bytes, max_bytes: int, declared: int | None = None, chunk: int = 3, arriving: Arriving | None = None):
    return asyncio.run(read_json(Request(body, declared, chunk), max_bytes, arriving))


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


def test_a_dropped_clip_another_request_holds_stays_and_a_clip_taken_again_counts_as_recent(tmp_path):
    store = AudioStore(tmp_path / "clips", 100)
    a = _clip(store, 1)
    assert store.retake(a)  # a second request holds it too
    store.release(a, drop=True)
    assert a.exists() and store.size == 10
    store.release(a, drop=True)
    assert not a.exists() and store.size == 0 and store.deleted == 1
    b, c = _clip(store, 2), _clip(store, 3)
    store.release(b), store.release(c)
    assert store.retake(b) and b.exists()
    store.release(b)
    assert list(store._files) == [c, b]  # taken again, b is the most recent
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
    monkeypatch.setattr(sf, "info", lambda path: SimpleNamespace(frames=800, samplerate=0, channels=1))
    assert clip_seconds(tmp_path / "clip.m4a", 5.0) == 2.5  # a header saying 0 Hz is decoded, never divided by


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
    assert not store.retake(tmp_path / "clips" / "never.wav")  # a clip the folder never held: nothing held
    assert store.size == 10  # a's 10 bytes stay booked until trimmed; the missing clip adds none


def test_the_services_sent_clips_memo_holds_4096_clips():
    """The service builds ``SentClips()``: its default is the service's bound on remembered clips."""
    assert SentClips().memo.max_items == 4096


def test_a_body_too_big_names_the_clip_size_that_raises_its_limit():
    """The service's 413 says which --max-audio-mb gave the limit (the issue's 36001112 bytes: 25 MB)."""
    assert body_limit(25 << 20) == 36_001_112
    assert body_too_big(36_001_112).endswith("over the 36001112-byte limit (it follows --max-audio-mb 25: raise that)")
    assert "(it follows --max-audio-mb 2: raise that)" in body_too_big(body_limit(2 << 20))


def test_bodies_arriving_at_once_hold_their_bound_and_give_back_what_they_took():
    arriving = Arriving(10)
    assert arriving.take(6) and arriving.take(4) and arriving.size == 10  # exactly at the bound: taken
    assert not arriving.take(1) and arriving.size == 10
    arriving.give(4)
    assert arriving.size == 6 and arriving.take(4)
    shared = Arriving(12)
    assert shared.take(5)  # another body still arriving
    with pytest.raises(Refused) as refused:  # 5 + 3 + 3 fit, the last 2 bytes would make 13
        read(b'{"a": 1}', 100, arriving=shared)
    assert (refused.value.status, refused.value.kind, refused.value.headers) == (
        429,
        "rate_limit_error",
        {"Retry-After": "1"},
    )
    assert shared.size == 5  # the refused body gave back what it took, not the chunk it never took
    alone = Arriving(8)
    assert read(b'{"a": 1}', 100, arriving=alone) == {"a": 1} and alone.size == 0  # whole: given back


def test_a_body_of_more_than_65536_json_values_is_refused_before_it_is_parsed():
    """The bound counts ``{``, ``[`` and commas: ``{"a":[0,...]}`` with n zeros holds n + 1."""
    at = b'{"a":[' + b",".join([b"0"] * ((1 << 16) - 1)) + b"]}"
    assert len(read(at, len(at), chunk=1 << 16)["a"]) == (1 << 16) - 1
    over = at.replace(b"[0,", b"[0,0,", 1)
    with pytest.raises(Refused, match="more than 65536 JSON separators") as refused:
        read(over, len(over), chunk=1 << 16)
    assert refused.value.status == 413


def _header(monkeypatch, rate: int, channels: int, seconds: float):
    """sf.info says what a clip's header would (a real small WAV behind it, read for its samples)."""
    from types import SimpleNamespace

    monkeypatch.setattr(
        sf, "info", lambda path: SimpleNamespace(frames=int(rate * seconds), samplerate=rate, channels=channels)
    )


def test_a_header_is_checked_for_the_samples_the_tools_hear_before_anything_is_decoded(tmp_path, monkeypatch):
    """8 channels at 96 kHz: 31.25 s make 24,000,000 samples (tools.decoders.MAX_DECODED_SAMPLES)."""
    clip = _wav(tmp_path / "a.wav", 0.5)
    _header(monkeypatch, 96_000, 8, 100.0)
    assert clip_seconds(clip, 200.0, heard_s=30.0) == pytest.approx(100.0)  # the tools hear 30 s: 23 M samples
    _header(monkeypatch, 96_000, 8, 40.0)
    with pytest.raises(AudioError, match="over 24000000 samples") as refused:
        clip_seconds(clip, 60.0, heard_s=35.0)  # they would hear 35 s: 26.9 M
    assert refused.value.code == "too_many_samples"
    _header(monkeypatch, 96_000, 8, 34.0)
    with pytest.raises(AudioError, match="over 24000000 samples"):
        clip_seconds(clip, 35.0)  # no heard_s: the whole clip up to the limit is what is heard


def _exchange(scope: dict, messages: list[dict], max_bytes: int = 8, timeout_s: float = 1.0):
    """WholeBody in front of an app that reads twice and answers 200: (what the app got, what was sent)."""
    got: dict = {}

    async def app(scope, receive, send):
        got["receive"], got["first"], got["second"] = receive, await receive(), await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})

    queue, sent = list(messages), []

    async def receive():
        if queue:
            return queue.pop(0)
        await asyncio.sleep(30)  # a client that sends nothing more

    async def send(message):
        sent.append(message)

    async def main():
        await WholeBody(app, max_bytes, timeout_s)(scope, receive, send)
        return receive

    got["client_receive"] = asyncio.run(main())
    return got, sent


def _part(body: bytes, more: bool) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


GONE = {"type": "http.disconnect"}


def test_a_posted_body_reaches_the_app_whole_in_one_message_and_then_the_client_going_away():
    for method in ("POST", "PUT", "PATCH"):
        got, sent = _exchange({"type": "http", "method": method}, [_part(b'{"a"', True), _part(b": 1}", False), GONE])
        assert got["first"] == _part(b'{"a": 1}', False) and got["second"] == GONE  # 8 bytes: at the limit
        assert [m.get("status") for m in sent] == [200]


def test_a_get_or_a_lifespan_passes_to_the_app_unread():
    for scope in ({"type": "http", "method": "GET"}, {"type": "lifespan"}):
        got, sent = _exchange(scope, [_part(b"", False), GONE])
        assert got["receive"] is got["client_receive"] and got["first"] == _part(b"", False)


def _refusal(sent: list[dict]) -> tuple[int, dict]:
    import json

    start, body = sent
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json" and headers[b"connection"] == b"close"
    assert int(headers[b"content-length"]) == len(body["body"])
    return start["status"], json.loads(body["body"])["error"]


def test_a_body_over_its_bytes_is_a_413_and_one_past_its_deadline_a_408_neither_reaching_the_app():
    got, sent = _exchange({"type": "http", "method": "POST"}, [_part(b'{"a"', True), _part(b": 12}", False)])
    status, error = _refusal(sent)
    assert "first" not in got and status == 413 and error["type"] == "invalid_request_error"
    assert "over the 8-byte limit" in error["message"]
    got, sent = _exchange({"type": "http", "method": "POST"}, [_part(b"{", True)], timeout_s=0.05)
    status, error = _refusal(sent)
    assert "first" not in got and status == 408 and error["type"] == "timeout_error"
    assert error["message"] == "the request body did not arrive within 0.05 s"
    got, sent = _exchange({"type": "http", "method": "POST"}, [_part(b"{", True), GONE])
    assert "first" not in got and sent == []  # gone before its body was whole: nothing to answer


def test_the_same_clip_held_twice_is_booked_once_and_a_clip_gone_before_it_is_booked_weighs_nothing(
    tmp_path, monkeypatch
):
    import autagent.reasoners.messages as messages

    store = AudioStore(tmp_path / "clips", 100)
    a, again = _clip(store, 1), _clip(store, 1)  # the same bytes sent by two requests: one file
    assert a == again and store.size == 10
    monkeypatch.setattr(messages, "store_audio", lambda raw, fmt, folder, max_bytes: folder / "gone.wav")
    store.hold(b"\x02" * 10, "wav")  # deleted (by another request's drop) before it was booked
    assert store.size == 10

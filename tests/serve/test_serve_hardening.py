"""``autagent serve`` for weeks: a body is read only once admitted and only up to its limit; clip work
runs off the event loop; requests run side by side; a streamed answer keeps its slot and ends with an
error event when the upstream fails; unknown and mistyped fields are 400s while vLLM's sampling
fields pass through; every cache is bounded; clips longer than the tools hear are refused; remote
audio never reaches a private address unless allowed."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from helpers.serve import (
    TOOLS,
    InThread,
    Upstream,
    chat_message,
    post_concurrently,
    router_plugin,
    service_options,
    start_service,
)


@pytest.fixture(scope="module")
def quiet_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("hardening") / "quiet", [-5.0] * len(TOOLS))


@pytest.fixture(scope="module")
def tempo_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("hardening") / "tempo", [-5.0, -5.0, -5.0, 5.0, -5.0, -5.0])


def _settled(url: str) -> bool:
    """``/health`` reports nothing in flight (within 5 s: a finished stream lets go of its slot)."""
    deadline = time.time() + 5
    while httpx.get(url + "/health").json()["in_flight"] and time.time() < deadline:
        time.sleep(0.05)
    return httpx.get(url + "/health").json()["in_flight"] == 0


def _raw_post(url: str, head: bytes, body: bytes, wait: float = 8.0) -> bytes:
    """Send a request line, headers and (part of) a body over a socket; the status line that comes back."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(head + body)
        try:
            return sock.recv(200)
        except TimeoutError:
            return b"(no answer)"


def test_a_full_service_refuses_before_reading_the_body_and_a_declared_oversize_at_once(
    quiet_plugin, tmp_path, melody_wav
):
    slow = Upstream("drip")
    service = start_service(
        quiet_plugin, tmp_path, upstream=slow.url, max_concurrency=1, max_queue=0, max_audio_bytes=600_000
    )
    body = {"model": "m", "stream": True, "messages": chat_message(melody_wav[0], "Which is it?", ["one", "two"])}
    try:
        with httpx.stream("POST", service.url + "/v1/chat/completions", json=body, timeout=30) as busy:
            lines = busy.iter_lines()
            first = next(lines)  # the one slot is taken while this stream runs
            assert httpx.get(service.url + "/health").json()["in_flight"] == 1, (
                first,
                slow.release.is_set(),
                list(lines),
            )
            head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            partial = _raw_post(service.url, head + b"Content-Length: 100000\r\n\r\n", b'{"model": ')
            assert partial.startswith(b"HTTP/1.1 429"), partial
            slow.release.set()
            assert [line for line in lines if line][-1] == "data: [DONE]"
        assert _settled(service.url)
        huge = _raw_post(service.url, head + b"Content-Length: 1000000000\r\n\r\n", b"{")
        assert huge.startswith(b"HTTP/1.1 413"), huge
        chunked = httpx.post(  # no Content-Length: refused once what came passes the limit
            service.url + "/v1/chat/completions",
            content=iter([b"[" + b"0," * 1_000_000 + b"0]"]),
            headers={"Content-Type": "application/json"},
            timeout=60,
        )
        assert chunked.status_code == 413 and "limit (it follows --max-audio-mb" in chunked.json()["error"]["message"]
        assert _settled(service.url)
    finally:
        service.stop()
        slow.httpd.shutdown()


def test_the_clip_is_decoded_hashed_and_stored_off_the_event_loop_and_its_length_read_from_the_header(
    quiet_plugin, tmp_path, melody_wav, click_wav, monkeypatch
):
    import tools.audio
    from autagent.reasoners import messages as chat

    where, store = [], chat.store_audio

    def watched(*args):
        where.append(threading.get_ident())
        return store(*args)

    monkeypatch.setattr(chat, "store_audio", watched)
    echo = Upstream("echo")
    service = start_service(quiet_plugin, tmp_path, upstream=echo.url, max_audio_seconds=5.0)
    try:
        ok = httpx.post(
            service.url + "/v1/chat/completions",
            json={"model": "m", "messages": chat_message(melody_wav[0], "Which?", ["one", "two"])},
            timeout=60,
        )
        assert ok.status_code == 200 and where and service.thread.ident not in where

        def no_decoding(*args, **kwargs):
            raise AssertionError("the whole clip was decoded to read its length")

        monkeypatch.setattr(tools.audio, "_read_any", no_decoding)
        long = httpx.post(
            service.url + "/v1/chat/completions",
            json={"model": "m", "messages": chat_message(click_wav[0], "Which?", ["one", "two"])},
            timeout=60,
        )
        assert long.status_code == 400 and "longer than 5 s" in long.json()["error"]["message"], long.text
    finally:
        service.stop()
        echo.httpd.shutdown()


def test_eight_requests_run_side_by_side_on_a_service_of_eight(quiet_plugin, tmp_path, melody_wav):
    """No lock is shared by all requests and the worker threads are as many as the requests let in."""
    from autagent.serve import create_app

    echo = Upstream("echo")
    options = service_options(quiet_plugin, tmp_path, upstream=echo.url, max_concurrency=8)
    together = threading.Barrier(8, timeout=30)
    augment = options.plugin.augment_query

    def waits_for_the_others(messages, query):
        together.wait()  # raises BrokenBarrierError unless all eight are in here at once
        return augment(messages, query)

    options.plugin.augment_query = waits_for_the_others
    service = InThread(create_app(options))
    body = {"model": "m", "messages": chat_message(melody_wav[0], "Which is it?", ["one", "two"])}
    try:
        replies = post_concurrently(service.url + "/v1/chat/completions", body, 8, timeout=60)
        assert [r.status_code for r in replies] == [200] * 8, [r.text[:200] for r in replies]
    finally:
        service.stop()
        echo.httpd.shutdown()


def test_a_streamed_answer_keeps_its_slot_and_an_upstream_failing_mid_stream_ends_it_with_an_error_event(
    quiet_plugin, tmp_path, melody_wav
):
    import openai

    drip, broken = Upstream("drip"), Upstream("broken")
    body = {"model": "m", "stream": True, "messages": chat_message(melody_wav[0], "Which is it?", ["one", "two"])}
    service = start_service(quiet_plugin, tmp_path, upstream=drip.url, max_concurrency=1, max_queue=0)
    try:
        with httpx.stream("POST", service.url + "/v1/chat/completions", json=body, timeout=30) as running:
            lines = running.iter_lines()
            assert next(lines).startswith("data: ")
            assert httpx.get(service.url + "/health").json()["in_flight"] == 1
            second = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=30)
            assert second.status_code == 429
            drip.release.set()
            assert [line for line in lines if line][-1] == "data: [DONE]"
        assert _settled(service.url)
    finally:
        service.stop()
    service = start_service(quiet_plugin, tmp_path, upstream=broken.url)
    try:
        client = openai.OpenAI(base_url=service.url + "/v1", api_key="unused", max_retries=0)
        stream = client.chat.completions.create(model="m", stream=True, messages=body["messages"])
        with pytest.raises(openai.APIError, match="the upstream failed mid-stream"):
            for _ in stream:
                pass
        assert _settled(service.url)
        assert "autagent_upstream_errors_total 1.0" in httpx.get(service.url + "/metrics").text
    finally:
        service.stop()
        drip.httpd.shutdown()
        broken.httpd.shutdown()


def test_unknown_or_mistyped_fields_are_400s_and_vllm_sampling_fields_pass_through(quiet_plugin, tmp_path, melody_wav):
    echo = Upstream("echo")
    service = start_service(quiet_plugin, tmp_path, upstream=echo.url)
    messages = chat_message(melody_wav[0], "Which is it?", ["one", "two"])
    url = service.url + "/v1/chat/completions"
    try:
        ok = httpx.post(url, json={"model": "m", "messages": messages, "top_k": 20, "temperature": 0.2}, timeout=60)
        assert ok.status_code == 200, ok.text
        assert echo.seen[-1]["top_k"] == 20 and echo.seen[-1]["temperature"] == 0.2 and "choices" not in echo.seen[-1]
        for body, words in (
            ({"messages": messages}, "model is required"),
            ({"model": "m", "messages": messages, "temperature": "hot"}, "temperature must be a number, got string"),
            ({"model": "m", "messages": messages, "stream": "yes"}, "stream must be a boolean, got string"),
            ({"model": "m", "messages": messages, "frobnicate": 1}, "unknown request field 'frobnicate'"),
        ):
            reply = httpx.post(url, json=body, timeout=60)
            assert reply.status_code == 400 and words in reply.json()["error"]["message"], reply.text
        assert len(echo.seen) == 1
    finally:
        service.stop()
        echo.httpd.shutdown()


def test_clips_longer_than_the_tools_hear_are_refused_unless_the_service_says_so(tempo_plugin, tmp_path, click_wav):
    body = {"model": "m", "messages": chat_message(click_wav[0], "What is the tempo?", ["60 BPM", "120 BPM"])}  # 10 s
    service = start_service(tempo_plugin, tmp_path, overrides={"tools.max_seconds": 5.0})
    try:
        refused = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=60)
        assert refused.status_code == 400, refused.text
        assert "longer than 5 s (the tools hear at most that)" in refused.json()["error"]["message"]
    finally:
        service.stop()
    service = start_service(tempo_plugin, tmp_path, overrides={"tools.max_seconds": 5.0}, max_audio_seconds=20.0)
    try:
        reply = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=120).json()
        assert reply["autagent"]["tools"] == ["tempo"] and reply["autagent"]["tools_heard_s"] == 5.0
    finally:
        service.stop()


def test_the_clips_folder_stays_under_its_size_over_a_long_run(quiet_plugin, tmp_path, melody_wav):
    import soundfile as sf

    samples, rate = sf.read(str(melody_wav[0]))
    echo = Upstream("echo")
    clip_bytes = Path(melody_wav[0]).stat().st_size
    service = start_service(quiet_plugin, tmp_path, upstream=echo.url, audio_cache_bytes=3 * clip_bytes + 100)
    try:
        for k in range(8):
            path = tmp_path / f"clip{k}.wav"
            sf.write(str(path), samples * (0.5 + 0.05 * k), rate)  # eight different clips of the same size
            reply = httpx.post(
                service.url + "/v1/chat/completions",
                json={"model": "m", "messages": chat_message(path, "Which?", ["one", "two"])},
                timeout=60,
            )
            assert reply.status_code == 200
            stored = list((tmp_path / "audio").iterdir())
            assert sum(p.stat().st_size for p in stored) <= 3 * clip_bytes + 100 and len(stored) <= 3
    finally:
        service.stop()
        echo.httpd.shutdown()


def test_remote_audio_never_reaches_a_private_or_loopback_address_unless_allowed(quiet_plugin, tmp_path, melody_wav):
    import asyncio

    from autagent.reasoners.messages import BadRequest
    from autagent.serve.remote import fetch

    clip = Path(melody_wav[0]).read_bytes()

    def handler(request):
        if request.headers["host"] == "audio.example":
            return httpx.Response(302, headers={"location": "http://127.0.0.1:8080/secret.wav"})
        return httpx.Response(200, content=clip)

    public = {"audio.example": ["93.184.216.34"]}.get
    resolver = lambda host: public(host) or [host.strip("[]")]  # noqa: E731
    transport = httpx.MockTransport(handler)
    with pytest.raises(BadRequest, match="private, loopback or link-local address"):
        asyncio.run(fetch("http://audio.example/a.wav", 1 << 20, False, resolver, transport))
    fetched = asyncio.run(fetch("http://audio.example/a.wav", 1 << 20, True, resolver, transport))
    assert fetched == clip

    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    files = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Quiet(*a, directory=str(Path(melody_wav[0]).parent)))
    threading.Thread(target=files.serve_forever, daemon=True).start()
    signed = "?X-Amz-Signature=" + "ab12" * 80  # a signed URL: once part of the file's name (a 500 past 255)
    url = f"http://127.0.0.1:{files.server_address[1]}/{Path(melody_wav[0]).name}{signed}"
    echo = Upstream("echo")
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "audio_url", "audio_url": {"url": url}},
                {"type": "text", "text": "Which?\n(A) a\n(B) b"},
            ],
        }
    ]
    try:
        for allow_private, status in ((False, 400), (True, 200)):
            service = start_service(
                quiet_plugin,
                tmp_path,
                upstream=echo.url,
                allow_remote_audio=True,
                allow_private_audio_hosts=allow_private,
            )
            try:
                reply = httpx.post(
                    service.url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=60
                )
                assert reply.status_code == status, reply.text
                if status == 400:
                    assert "private, loopback" in reply.json()["error"]["message"]
                    assert "127.0.0.1" not in reply.text  # no address told
            finally:
                service.stop()
    finally:
        files.shutdown()
        echo.httpd.shutdown()


def test_every_in_memory_cache_stays_under_its_bound_over_a_long_run(tmp_path, monkeypatch):
    from autagent.data.sample import Sample
    from autagent.reasoners import base, embedded, hearing
    from autagent.reasoners.base import CachedReasoner, Reply
    from autagent.reasoners.encoders import AudioEncoder, TextEncoder
    from tools.memo import BoundedMemo

    memo = BoundedMemo(4, max_bytes=1000, size=len)
    for k in range(100):
        memo[k] = "x" * (k % 300)
        assert len(memo) <= 4 and memo.bytes <= 1000
    assert 99 in memo and 0 not in memo

    text = TextEncoder(memo_items=16)
    texts = [f"sentence number {k}" for k in range(100)]
    vectors = np.concatenate([text.encode(texts[i : i + 7]) for i in range(0, 100, 7)])
    assert len(text._memo) <= 16
    assert np.allclose(vectors[:3], TextEncoder(memo_items=16).encode(texts[:3]), atol=1e-5)

    class Inner:
        name = "fake"

        def fingerprint(self):
            return "fake-1"

        def answer_many(self, requests):
            return [Reply(s.question.upper()) for s, _ in requests]

    monkeypatch.setattr(base, "audio_identity", lambda path: "clip")
    answers = CachedReasoner(Inner(), tmp_path / "answers", max_memory_answers=5)
    for k in range(60):
        sample = Sample(id=str(k), audio=str(tmp_path / "none.wav"), question=f"q{k}", choices=("a", "b"), answer="a")
        assert answers.answer(sample, None) == f"Q{k}"
        assert len(answers._answers) <= 5
    answers.close()
    reloaded = CachedReasoner(Inner(), tmp_path / "answers", max_memory_answers=5)
    assert len(reloaded._answers) == 5  # the file keeps all 60; memory loads the last five

    rng = np.random.default_rng(0)
    clips = []
    for k in range(4):
        import soundfile as sf

        path = tmp_path / f"noise{k}.wav"
        sf.write(str(path), 0.1 * rng.standard_normal(16000).astype(np.float32), 16000)
        clips.append(str(path))
    audio = AudioEncoder(memo_items=2)
    monkeypatch.setattr(hearing, "HEARD_CLIPS", 2)
    listener = hearing.Listener()
    for path in clips:
        audio.encode_path(path)
        listener.listen(path)
        assert len(audio._memo) <= 2 and len(listener._memo) <= 2
    monkeypatch.setattr(embedded, "FACTS_MEMO_BYTES", 20_000)
    reader = embedded.EmbeddedReasoner()
    for k in range(30):
        reader.facts({"tool": "tempo", "output": {"bpm": 60.0 + k, "beats": [0.5 * i for i in range(8)]}})
        assert reader._facts.bytes <= 20_000
    assert len(reader._facts) < 30


def test_remote_audio_is_checked_as_it_is_reached_within_one_deadline_and_refusals_name_no_address():
    """One resolution per hop, of the name as it goes on the wire (IDNA 2008), every address checked,
    IPv4 carried inside IPv6 included, the connection made to the checked address with the name in
    the Host header; a server dripping bytes is cut at the overall deadline."""
    import asyncio

    from autagent.reasoners.messages import BadRequest
    from autagent.serve.remote import fetch, format_of, is_public

    for address in ("64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::", "::ffff:0:7f00:1", "::ffff:127.0.0.1", "::127.0.0.1"):
        assert not is_public(address), address
    assert not is_public("2001:0:4136:e378:8000:63bf:3fff:fdd2")  # Teredo carrying 192.0.2.45
    assert is_public("93.184.216.34") and is_public("2606:4700:4700::1111") and is_public("2002:5db8:d822::")

    asked, reached = [], []
    answers = {
        "xn--strae-oqa.example": [["93.184.216.34"], ["10.0.0.7"]],
        "strasse.example": [["10.0.0.7"]],
        "drip.example": [["93.184.216.35"]],
    }

    def resolver(host):  # a rebinding name: public when first asked, private after
        asked.append(host)
        return answers[host].pop(0) if len(answers[host]) > 1 else answers[host][0]

    def handler(request):
        reached.append((request.url.host, request.headers["host"]))
        return httpx.Response(200, content=b"RIFF-audio")

    got = asyncio.run(fetch("http://straße.example/a.wav", 1 << 20, False, resolver, httpx.MockTransport(handler)))
    assert got == b"RIFF-audio" and asked == ["xn--strae-oqa.example"]
    assert reached == [("93.184.216.34", "xn--strae-oqa.example")]  # the checked address, the name as Host

    with pytest.raises(BadRequest) as refused:
        asyncio.run(fetch("http://strasse.example/a.wav", 1 << 20, False, resolver, httpx.MockTransport(handler)))
    assert "10.0.0.7" not in str(refused.value) and "private" in str(refused.value)

    async def drip():
        while True:
            await asyncio.sleep(0.2)
            yield b"x"

    slow = httpx.MockTransport(lambda request: httpx.Response(200, content=drip()))
    started = time.perf_counter()
    with pytest.raises(BadRequest, match="took longer than 1 s"):
        asyncio.run(fetch("http://drip.example/a.wav", 1 << 20, False, resolver, slow, timeout_s=1.0))
    assert time.perf_counter() - started < 5

    assert format_of("https://cdn.example/a.mp3?X-Amz-Signature=abc.flac", b"") == "mp3"
    assert format_of("https://cdn.example/clip?sig=abc.exe", b"fLaC...") == "flac"

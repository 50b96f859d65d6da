"""Every request bounded end to end (issue 62): a deadline from its first byte to its last, a byte cap
on every read (the upstream's reply and each line of a streamed one), validation bounded before the
model, admission counted once a body is whole, no redirects followed upstream, no path of the server's
in what a client is told; and the choices a client gives reach the upstream (issue 63), whose own
refusal the client reads."""

from __future__ import annotations

import json
import socket
import time
from types import SimpleNamespace

import httpx
import pytest
from helpers.hostile_upstream import HostileUpstream
from helpers.serve import TOOLS, InThread, Upstream, chat_message, router_plugin, start_service


@pytest.fixture(scope="module")
def quiet_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("bounds") / "quiet", [-5.0] * len(TOOLS))


def _chat(url: str, clip, text_or_choices=("one", "two"), **extra) -> httpx.Response:
    body = {"model": "m", "messages": chat_message(clip, "Which is it?", text_or_choices), **extra}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=60)


def _warm(url: str, clip) -> None:
    """The plugin's encoders loaded (a first request pays for it), so that what is timed is the request."""
    import base64

    audio = base64.b64encode(clip.read_bytes()).decode()
    body = {"audio": audio, "question": "Which?", "choices": ["one", "two"]}
    assert httpx.post(url + "/v1/select", json=body, timeout=120).status_code == 200


def test_an_upstream_reply_dripped_a_byte_at_a_time_ends_at_the_upstream_timeout(quiet_plugin, tmp_path, melody_wav):
    drip = HostileUpstream("drip")  # about 20 s of bytes, each within the SDK's per-read timeout
    service = start_service(quiet_plugin, tmp_path, upstream=drip.url, upstream_timeout_s=2.0)
    try:
        _warm(service.url, melody_wav[0])
        started = time.perf_counter()
        reply = _chat(service.url, melody_wav[0])
        took = time.perf_counter() - started
    finally:
        service.stop()
        drip.httpd.shutdown()
    assert reply.status_code == 502 and "Timeout" in reply.json()["error"]["message"], reply.text
    assert took < 6, took


def test_an_upstream_reply_or_streamed_line_over_its_cap_is_refused(quiet_plugin, tmp_path, melody_wav):
    huge, long_line = HostileUpstream("huge", size=8 << 20), HostileUpstream("long_line", size=8 << 20)
    try:
        for upstream, stream in ((huge, False), (long_line, True)):
            service = start_service(quiet_plugin, tmp_path, upstream=upstream.url, max_upstream_reply_bytes=1 << 20)
            try:
                reply = _chat(service.url, melody_wav[0], stream=stream)
            finally:
                service.stop()
            if stream:  # the stream's error event, never the 8 MiB line
                assert reply.status_code == 200 and len(reply.content) < 1 << 20, len(reply.content)
                assert "ReplyTooLarge" in reply.text and "over 1048576 bytes" in reply.text, reply.text[:300]
            else:
                assert reply.status_code == 502 and "ReplyTooLarge" in reply.text, reply.text[:300]
    finally:
        huge.httpd.shutdown()
        long_line.httpd.shutdown()


def test_a_redirect_is_never_followed_and_nan_is_a_502(quiet_plugin, tmp_path, melody_wav):
    elsewhere = Upstream("echo")
    redirect, nan = HostileUpstream("redirect", target=elsewhere.url), HostileUpstream("nan")
    try:
        for upstream, said in ((redirect, "HTTP 307"), (nan, "not JSON")):
            service = start_service(quiet_plugin, tmp_path, upstream=upstream.url)
            try:
                reply = _chat(service.url, melody_wav[0])
            finally:
                service.stop()
            assert reply.status_code == 502 and said in reply.json()["error"]["message"], reply.text
        assert redirect.seen and not elsewhere.seen  # the clip never went to the other host
    finally:
        for server in (elsewhere, redirect, nan):
            server.httpd.shutdown()


def test_a_stream_that_hangs_is_cut_at_the_request_deadline(quiet_plugin, tmp_path, melody_wav):
    hang = HostileUpstream("hang_stream")
    service = start_service(quiet_plugin, tmp_path, upstream=hang.url, upstream_timeout_s=60.0, request_timeout_s=2.0)
    try:
        _warm(service.url, melody_wav[0])
        started = time.perf_counter()
        body = {"model": "m", "messages": chat_message(melody_wav[0], "Which?", ["one", "two"]), "stream": True}
        try:
            with httpx.stream("POST", service.url + "/v1/chat/completions", json=body, timeout=30) as reply:
                for _ in reply.iter_lines():
                    pass
        except httpx.HTTPError:  # cut mid-stream: the deadline's way of ending it
            pass
        took = time.perf_counter() - started
        assert took < 6, took
        deadline = time.time() + 5
        while httpx.get(service.url + "/health").json()["in_flight"] and time.time() < deadline:
            time.sleep(0.05)
        assert httpx.get(service.url + "/health").json()["in_flight"] == 0  # its slot let go
    finally:
        service.stop()
        hang.httpd.shutdown()


def test_the_choices_list_reaches_the_upstream_once_and_its_refusal_reaches_the_client(
    quiet_plugin, tmp_path, melody_wav
):
    strict = HostileUpstream("strict")
    service = start_service(quiet_plugin, tmp_path, upstream=strict.url)
    try:
        question = {"model": "m", "messages": chat_message(melody_wav[0], "Which chord is played first?", [])}
        listed = httpx.post(
            service.url + "/v1/chat/completions", json={**question, "choices": ["C major", "G major"]}, timeout=60
        )
        written = _chat(service.url, melody_wav[0], ["C major", "G major"], choices=["C major", "G major"])
        refused = httpx.post(service.url + "/v1/chat/completions", json=question, timeout=60)
    finally:
        service.stop()
        strict.httpd.shutdown()
    assert listed.status_code == 200, listed.text
    assert listed.json()["choices"][0]["message"]["content"] == "(A) C major\n(B) G major"
    assert written.status_code == 200 and written.json()["choices"][0]["message"]["content"].count("(A)") == 1
    assert all("choices" not in body for body in strict.seen)  # ours, never an upstream field
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert message.startswith("the upstream refused the request: HTTP 400: the prompt sent to <path> has no choices")
    assert "/srv" not in message and len(message) < 700


def test_a_body_of_many_small_items_is_refused_before_the_model_and_health_answers(quiet_plugin, tmp_path):
    service = start_service(quiet_plugin, tmp_path, upstream="http://127.0.0.1:9/v1")
    headers = {"Content-Type": "application/json"}
    try:
        wide = httpx.post(service.url + "/v1/chat/completions", json={"messages": [{}] * 5000}, timeout=30)
        parts = [{"role": "user", "content": [{}] * 600}] * 2
        many_parts = httpx.post(service.url + "/v1/chat/completions", json={"messages": parts}, timeout=30)
        started = time.perf_counter()
        flood = '{"messages": [' + ",".join(["{}"] * 2_000_000) + "]}"  # 6 MB
        huge = httpx.post(service.url + "/v1/chat/completions", content=flood, headers=headers, timeout=60)
        took = time.perf_counter() - started
        assert httpx.get(service.url + "/health", timeout=5).status_code == 200
    finally:
        service.stop()
    assert wide.status_code == 400 and "messages has 5000 items, over the 1024-item limit" in wide.text, wide.text
    assert many_parts.status_code == 400 and "1200 content parts in all" in many_parts.text, many_parts.text
    assert huge.status_code == 413 and "JSON separators" in huge.text and took < 5, (huge.text, took)


def test_choices_past_the_cap_in_a_text_or_an_mcp_select_are_refused_before_any_work():
    from autagent.reasoners.messages import BadRequest, question_and_choices
    from autagent.serve.mcp_server import AcousticTools, McpOptions

    text = "Which?\n" + "\n".join(f"(A) {i}" for i in range(7000))
    with pytest.raises(BadRequest, match="lists 7000 choices, over the 64-choice limit"):
        question_and_choices(text)
    asked = []
    plugin = SimpleNamespace(tools=["tempo"], select=lambda *a: asked.append(a), content_hash="x")
    tools = AcousticTools(None, plugin, McpOptions(audio_dir="/nonexistent-never-written"))
    with pytest.raises(BadRequest, match="at most 64"):
        tools.select("data:audio/wav;base64,AAAA", "Which?", [f"c{i}" for i in range(10_000)])
    assert not asked


def test_idle_bodies_lock_nobody_out_and_mcp_over_http_has_a_body_deadline(quiet_plugin, tmp_path, melody_wav):
    from autagent.serve.mcp_server import AcousticTools, McpOptions, build_server, http_app

    head = b"POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    echo = Upstream("echo")
    service = start_service(
        quiet_plugin, tmp_path, upstream=echo.url, max_concurrency=1, max_queue=1, body_timeout_s=3.0
    )
    options = McpOptions(transport="http", audio_dir=str(tmp_path / "mcp"), body_timeout_s=1.0)
    mcp = InThread(http_app(build_server(AcousticTools(SimpleNamespace(tool_ids=[]), None, options)), options))
    idle = []
    try:
        for url, path in [(service.url, b"/v1/chat/completions")] * 6 + [(mcp.url, b"/mcp")] * 6:
            host, port = url.split("//")[1].split(":")
            idle.append(socket.create_connection((host, int(port)), timeout=10))
            idle[-1].sendall(head % path)  # headers and one byte of the body, then nothing
        started = time.perf_counter()
        ok = _chat(service.url, melody_wav[0])
        assert ok.status_code == 200, ok.text  # the six idle bodies held no place
        answers = [sock.recv(200) for sock in idle[6:]]  # MCP's: refused at its deadline
        assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers[:2]
        assert time.perf_counter() - started < 4
        assert idle[0].recv(200).startswith(b"HTTP/1.1 408")
    finally:
        for sock in idle:
            sock.close()
        service.stop()
        mcp.stop()
        echo.httpd.shutdown()


def test_docs_need_nothing_from_outside_and_a_connection_error_names_its_address(quiet_plugin, tmp_path):
    import asyncio

    import openai

    from autagent.reasoners.openai_http import client, failure_name

    service = start_service(quiet_plugin, tmp_path, upstream="http://127.0.0.1:9/v1")
    try:
        page = httpx.get(service.url + "/docs")
        schema = httpx.get(service.url + "/openapi.json").json()
    finally:
        service.stop()
    assert page.status_code == 200 and "/v1/chat/completions" in page.text and "messages" in page.text
    assert not any(word in page.text for word in ("<script", "<link", "src=", "cdn"))
    assert "/docs" not in schema["paths"]

    async def ask():
        down = client("http://user:secret@127.0.0.1:9/v1", "NO_SUCH_KEY_VARIABLE", 0, 5.0)
        try:
            await down.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        except openai.APIConnectionError as err:
            return failure_name(err), failure_name(err, url=False)
        finally:
            await down.close()

    named, unnamed = asyncio.run(ask())
    assert named.startswith("ConnectionError") and named.endswith("to http://127.0.0.1:9/v1/chat/completions")
    assert "secret" not in named and "127.0.0.1" not in unnamed


def test_a_failed_reasoner_in_process_names_no_path(tmp_path, melody_wav):
    from autagent.serve.upstream import LocalReasoner, UpstreamError

    class Failing:
        def ask(self, items):
            ((sample, _),) = items
            return [SimpleNamespace(error=f"cannot read {sample.audio}: gone from {tmp_path}/x", text=None)]

    local = LocalReasoner(Failing(), "embedded", tmp_path / "clips", 10 << 20)
    body = {"messages": chat_message(melody_wav[0], "Which?", ["one", "two"])}
    with pytest.raises(UpstreamError) as caught:
        local._answer(body)
    assert "cannot read the clip: gone from <path>" in str(caught.value) and str(tmp_path) not in str(caught.value)


def test_a_body_with_choices_is_valid_and_its_choices_never_go_upstream_as_a_field():
    """A mutant that drops ``choices`` from the fields kept back (protocol.py's OURS) fails here: the
    other tests' bodies never carry ``choices``."""
    from autagent.serve.protocol import ChatRequest, split_for_sdk

    body = {"model": "m", "messages": [{"role": "user", "content": "Which?"}], "choices": ["a", "b"], "top_k": 5}
    ChatRequest.checked(body)
    payload, extra = split_for_sdk(body)
    assert "choices" not in payload and "choices" not in extra and extra == {"top_k": 5}
    assert json.dumps(payload)  # what goes to the SDK is plain JSON


def test_bodies_still_arriving_hold_at_most_the_places_bodies_bytes(quiet_plugin, tmp_path):
    """Bodies count for a place only once whole, so what they hold meanwhile has its own bound: as many
    bytes as the places' bodies (here one place: one body's worth), a 429 past it."""
    service = start_service(
        quiet_plugin, tmp_path, upstream="http://127.0.0.1:9/v1", max_concurrency=1, max_queue=0, max_audio_bytes=30_000
    )
    host, port = service.url.split("//")[1].split(":")
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    chunk = b" " * 700_000  # JSON allows whitespace: well under one body's limit, over half of it
    try:
        with socket.create_connection((host, int(port)), timeout=10) as first:
            first.sendall(head + b"Content-Length: 1000000\r\n\r\n" + chunk)
            time.sleep(1.0)  # read by the service, held as arriving
            with socket.create_connection((host, int(port)), timeout=10) as second:
                second.sendall(head + b"Content-Length: 1000000\r\n\r\n" + chunk)
                answer = b""
                while b"}}" not in answer and len(answer) < 2000:
                    answer += second.recv(2000)
            assert answer.startswith(b"HTTP/1.1 429") and b"bodies arriving at once" in answer, answer
            assert httpx.get(service.url + "/health").json()["in_flight"] == 0
        deadline = time.time() + 5  # the first client gone mid-body: counted, never an internal error
        while 'kind="client_disconnected"' not in httpx.get(service.url + "/metrics").text and time.time() < deadline:
            time.sleep(0.1)
        metrics = httpx.get(service.url + "/metrics").text
        assert 'kind="client_disconnected"' in metrics and 'kind="internal_error"' not in metrics, metrics
    finally:
        service.stop()

"""Issue 64.3: the validated request handed down to the upstream call, the clip decoded once per
request, one typed error response.  Through HTTP, stand-in upstreams."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import httpx
import pytest
from helpers.serve import TOOLS, FakeUpstream, QuietHandler, Upstream, chat_message, router_plugin, start_service


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("typed") / "quiet", [-5.0] * len(TOOLS))


def test_the_clip_is_decoded_from_base64_once_a_request_and_converted_for_the_upstream_once_a_content(
    quiet, tmp_path, melody_wav, monkeypatch
):
    """A 44.1 kHz stereo clip (resampled to 16 kHz mono for the upstream): its base64 text is decoded
    once per request (it was twice: by the service's reader and again on the way upstream), the
    conversion is made from the stored clip once for its content (in a worker thread; a clip converted
    before costs no thread hop), and the upstream gets the very messages the audio policy makes of the
    request (:func:`for_upstream`); the same clip in an earlier message of the conversation is the
    same clip."""
    from autagent.serve import upstream_audio
    from autagent.serve.upstream_audio import for_upstream

    clip = chat_message(melody_wav[0], "Which?", ["one", "two"])
    data = clip[0]["content"][0]["input_audio"]["data"]
    turn = [*clip, {"role": "assistant", "content": "one"}, *clip]  # the clip again, with every turn
    expected = [for_upstream(clip, "send", 16000), for_upstream(turn, "send", 16000)]
    decoded, b64decode = [], base64.b64decode
    monkeypatch.setattr(
        base64, "b64decode", lambda text, *a, **k: decoded.append(text == data) or b64decode(text, *a, **k)
    )
    converted, decode = [], upstream_audio.decode
    monkeypatch.setattr(upstream_audio, "decode", lambda *a, **k: converted.append(1) or decode(*a, **k))
    hops, to_thread = [], asyncio.to_thread
    monkeypatch.setattr(
        asyncio, "to_thread", lambda work, *a, **k: hops.append(work.__name__) or to_thread(work, *a, **k)
    )
    echo = Upstream("echo")
    service = start_service(quiet, tmp_path / "service", upstream=echo.url)
    try:
        reply = httpx.post(service.url + "/v1/chat/completions", json={"model": "m", "messages": clip}, timeout=60)
        assert reply.status_code == 200, reply.text
        assert sum(decoded) == 1 and len(converted) == 1
        assert echo.seen[0]["messages"] == expected[0]
        sent = echo.seen[0]["messages"][0]["content"][0]["input_audio"]
        assert sent["format"] == "wav" and base64.b64decode(sent["data"])[:4] == b"RIFF"
        reply = httpx.post(service.url + "/v1/chat/completions", json={"model": "m", "messages": turn}, timeout=60)
        assert reply.status_code == 200, reply.text
        assert sum(decoded) == 1 and len(converted) == 1  # known by its text; converted before
        assert hops.count("for_upstream") == 1  # nothing to decode the second time: no worker thread
        assert echo.seen[1]["messages"] == expected[1]
    finally:
        service.stop()
        echo.httpd.shutdown()


def test_a_remote_clip_is_fetched_once_a_request_and_goes_upstream_as_data(quiet, tmp_path, melody_wav):
    """An allowed http(s) clip is fetched by the service once (it was fetched twice: to read it, and
    again on the way upstream) and sent on from the stored clip as a data: URL, at 16 kHz."""
    import io

    import soundfile as sf

    raw, fetched = Path(melody_wav[0]).read_bytes(), []

    class Handler(QuietHandler):
        def do_GET(self):  # noqa: N802 - http.server API
            fetched.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "audio/wav")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    clips, echo = FakeUpstream(Handler), Upstream("echo")
    url = clips.url.removesuffix("/v1") + "/melody.wav"
    options = {"allow_remote_audio": True, "allow_private_audio_hosts": True}
    service = start_service(quiet, tmp_path / "service", upstream=echo.url, **options)
    part = {"type": "audio_url", "audio_url": {"url": url}}
    messages = [{"role": "user", "content": [part, {"type": "text", "text": "Which?\n(A) one\n(B) two"}]}]
    try:
        reply = httpx.post(service.url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=60)
        assert reply.status_code == 200, reply.text
    finally:
        service.stop()
        echo.httpd.shutdown()
        clips.httpd.shutdown()
    assert fetched == ["/melody.wav"]
    sent = echo.seen[0]["messages"][0]["content"][0]["audio_url"]["url"]
    assert sent.startswith("data:audio/wav;base64,") and url not in json.dumps(echo.seen[0])
    info = sf.info(io.BytesIO(base64.b64decode(sent.split(",", 1)[1])))
    assert (info.samplerate, info.channels) == (16000, 1)


def test_the_clip_the_service_read_reaches_the_reasoner_in_process_without_a_second_decoding(
    quiet, tmp_path, melody_wav, monkeypatch
):
    """``serve --reasoner embedded --plugin``: the reasoner in process answers from the clip the
    service read and holds, not from a second decoding of its base64 text into the clips folder."""
    from autagent.reasoners import messages as chat

    decoded, decode = [], chat.decode_base64
    monkeypatch.setattr(chat, "decode_base64", lambda data: decoded.append(1) or decode(data))
    service = start_service(quiet, tmp_path / "service")
    try:
        messages = chat_message(melody_wav[0], "Which note comes first?", ["A4", "C5", "E5", "G4"])
        reply = httpx.post(service.url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=120)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"]
        assert len(decoded) == 1
        assert len(list((tmp_path / "service" / "audio").iterdir())) == 1
    finally:
        service.stop()


def test_every_refusal_and_failure_is_one_typed_error_response(quiet, tmp_path, melody_wav):
    """A 400 (the field named), a 401 (no key), a 502 (the upstream broken) and an upstream failing
    mid-stream (the last event) all render :class:`ErrorResponse`, the shape the OpenAPI document
    publishes for every refusal."""
    from autagent.serve.errors import ErrorResponse

    broken = Upstream("broken")
    service = start_service(quiet, tmp_path / "service", upstream=broken.url, api_key="sesame")
    url, key = service.url + "/v1/chat/completions", {"Authorization": "Bearer sesame"}
    messages = chat_message(melody_wav[0], "Which?", ["one", "two"])
    try:
        refused = httpx.post(url, json={"model": "m", "messages": messages, "temperature": "hot"}, headers=key)
        assert refused.status_code == 400
        assert ErrorResponse.model_validate(refused.json()).error.param == "temperature"
        unknown = httpx.post(url, json={"model": "m", "messages": messages})
        assert unknown.status_code == 401 and ErrorResponse.model_validate(unknown.json()).error.type
        streamed = httpx.post(url, json={"model": "m", "messages": messages, "stream": True}, headers=key, timeout=60)
        last = [line for line in streamed.text.splitlines() if line.startswith("data: {")][-1]
        error = ErrorResponse.model_validate(json.loads(last.removeprefix("data: ")))
        assert error.error.type == "upstream_error" and streamed.text.rstrip().endswith("data: [DONE]")
        document = httpx.get(service.url + "/openapi.json", headers=key).json()
        published = document["paths"]["/v1/chat/completions"]["post"]["responses"]["400"]["content"]
        schema = published["application/json"]["schema"]
        assert schema["required"] == ["error"] and set(schema["properties"]["error"]["properties"]) == {
            "message",
            "type",
            "param",
            "code",
        }
    finally:
        service.stop()
        broken.httpd.shutdown()
    assert not list(Path(tmp_path / "service" / "audio").glob(".tmp-*"))


def test_the_scripted_reasoner_without_agentic_takes_the_request_handed_down(quiet, tmp_path, melody_wav):
    """``serve --reasoner scripted`` without ``--agentic``: the request handed down is read as its body."""
    from helpers.serve import InThread

    from autagent.config import load_config
    from autagent.serve import build, create_app

    config = load_config(None, {"answer_cache_dir": str(tmp_path / "answers"), "tools.executor": "local"})
    built = build(config, reasoner="scripted", plugin=str(quiet), audio_dir=str(tmp_path / "audio"))
    service = InThread(create_app(built))
    try:
        messages = chat_message(melody_wav[0], "Which note comes first?", ["A4", "C5", "E5", "G4"])
        reply = httpx.post(service.url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=120)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]
    finally:
        service.stop()


def test_the_clips_converted_for_the_upstream_stay_under_their_bound():
    from autagent.serve.upstream_audio import Converted

    memo = Converted(max_items=3, max_bytes=10)
    for k in range(6):
        memo[(f"{k}.wav", 16000)] = ("x" * 4,)
        assert len(memo) <= 3 and memo.bytes <= 10
    memo[("as-sent.wav", 16000)] = (None,)  # sent as it came: nothing held but the entry
    assert memo.get(("5.wav", 16000)) == ("xxxx",) and memo.get(("0.wav", 16000)) is None

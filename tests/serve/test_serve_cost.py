"""The service's own cost per request, cut without changing what it does: the upstream gets the very
bytes the client would send it straight (the plugin's records included), whatever the service does
to get there; what it keeps to spare work (the clip check by content) stays within its bound.  The
speed itself is measured by ``bench/serve.py``, not here."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from helpers.serve import (
    FIXTURES,
    TOOLS,
    FakeUpstream,
    QuietHandler,
    Upstream,
    chat_message,
    router_plugin,
    start_service,
)


class RawUpstream(FakeUpstream):
    """A stand-in upstream that keeps the raw bytes of every body it is sent and answers "ok"."""

    def __init__(self):
        raw = self.raw = []

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server API
                raw.append(self.rfile.read(int(self.headers["Content-Length"])))
                body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

        super().__init__(Handler)


@pytest.fixture(scope="module")
def asr_tempo(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("cost") / "asr-tempo", [3.0, -3.0, -3.0, 3.0, -3.0, -3.0])


def test_the_upstream_gets_the_bytes_the_client_would_send_it_straight(asr_tempo, tiny_bench, tmp_path):
    """A fixed request through the service and the same request, records added by the Python API, sent
    straight with the ``openai`` SDK: the upstream reads the same bytes (fields, their order, the
    records' JSON, the clip's base64), for a request with sampling fields, a vLLM field and choices."""
    from openai import OpenAI

    from autagent import Plugin
    from autagent.serve.upstream_audio import for_upstream
    from tools.pool import PoolConfig

    records = PoolConfig(executor="local", cache_dir=str(FIXTURES))  # the cached records the service reads
    upstream = RawUpstream()
    service = start_service(asr_tempo, tmp_path / "service", upstream.url, {"tools.cache_dir": str(FIXTURES)})
    plugin = Plugin.load(asr_tempo, tools=records, audio_dir=tmp_path / "api-audio")
    straight = OpenAI(base_url=upstream.url, api_key="no-key", max_retries=0)
    try:
        for sample in tiny_bench["test"][:3]:
            messages = chat_message(sample.audio, sample.question, sample.choices)
            body = {"model": "m", "messages": messages, "temperature": 0.0, "max_tokens": 8, "top_k": 5}
            body["choices"] = list(sample.choices)  # our own field: read, never forwarded
            reply = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=120)
            assert reply.status_code == 200 and reply.json()["autagent"]["tools"] == ["asr", "tempo"], reply.text
            augmented = for_upstream(plugin.augment(messages, list(sample.choices)), "send", 16000)  # at 16 kHz
            straight.chat.completions.create(
                model="m", messages=augmented, temperature=0.0, max_tokens=8, extra_body={"top_k": 5}
            )
            through, direct = upstream.raw[-2:]
            assert through == direct, sample.id
            assert b"The following outputs of acoustic analysis tools" in through
    finally:
        service.stop()
        upstream.httpd.shutdown()


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("cost") / "quiet", [-5.0] * len(TOOLS))


def test_a_clip_sent_again_is_not_decoded_again_while_the_folder_keeps_it_and_a_refused_one_is_checked_again(
    quiet, tmp_path, melody_wav, monkeypatch
):
    """A conversation sends its clip with every turn: the second and third turns reuse the stored and
    checked clip (no decoding), the upstream getting the same body; once the file is gone the clip is
    decoded and stored again; a refused clip (silent) is never remembered, so refused every time."""
    import soundfile as sf

    from autagent.reasoners import messages as chat

    decoded, decode = [], chat.decode_base64
    monkeypatch.setattr(chat, "decode_base64", lambda data: decoded.append(1) or decode(data))
    silent = tmp_path / "silent.wav"
    sf.write(str(silent), np.zeros(16000, np.float32), 16000)
    echo = Upstream("echo")
    service = start_service(quiet, tmp_path / "service", upstream=echo.url)
    url = service.url + "/v1/chat/completions"

    def post(path):
        return httpx.post(
            url, json={"model": "m", "messages": chat_message(path, "Which?", ["one", "two"])}, timeout=60
        )

    try:
        assert [post(melody_wav[0]).status_code for _ in range(3)] == [200, 200, 200]
        assert len(decoded) == 1 and echo.seen[0] == echo.seen[1] == echo.seen[2]
        (stored,) = (tmp_path / "service" / "audio").iterdir()
        stored.unlink()  # the clips folder lost it (deleted by hand): read again, not a 500
        assert post(melody_wav[0]).status_code == 200 and len(decoded) == 2 and stored.exists()
        assert echo.seen[3] == echo.seen[0]
        for k in range(2):
            reply = post(silent)
            assert reply.status_code == 400 and "silent" in reply.json()["error"]["message"], reply.text
            assert len(decoded) == 3 + k
        assert len(echo.seen) == 4
    finally:
        service.stop()
        echo.httpd.shutdown()


def test_the_clips_remembered_by_content_stay_under_their_bound():
    from autagent.serve.limits import SentClips

    sent = SentClips(max_items=3)
    keys = [SentClips.key(f"AAAA{k:04d}", "wav") for k in range(10)]
    for k, key in enumerate(keys):
        sent.put(key, f"/clips/{k}.wav", 3, 1.0)
        assert len(sent.memo) <= 3
    assert sent.get(keys[-1]) == ("/clips/9.wav", 3, 1.0) and sent.get(keys[0]) is None
    assert SentClips.key("AAAA\u00e9", "wav") is None  # not base64: decoding refuses it, nothing to remember

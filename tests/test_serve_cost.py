"""The service's own cost per request, cut without changing what it does: the upstream gets the very
bytes the client would send it straight (the plugin's records included), whatever the service does
to get there; what it keeps to spare work (the clip check by content) stays within its bound.  The
speed itself is measured by ``bench/serve.py``, not here."""

from __future__ import annotations

import json

import httpx
import pytest
from helpers.serve import FIXTURES, FakeUpstream, QuietHandler, chat_message, router_plugin, start_service


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
            augmented = plugin.augment(messages, list(sample.choices))
            straight.chat.completions.create(
                model="m", messages=augmented, temperature=0.0, max_tokens=8, extra_body={"top_k": 5}
            )
            through, direct = upstream.raw[-2:]
            assert through == direct, sample.id
            assert b"The following outputs of acoustic analysis tools" in through
    finally:
        service.stop()
        upstream.httpd.shutdown()

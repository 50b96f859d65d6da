"""Who may use ``autagent serve``: flags taken only as spelt (no abbreviation), every setting one
documented field of ``ServeOptions``; the API key, the Host and Origin allow-lists and the JSON
content type, on HTTP and /v1/realtime; nothing about the upstream told to a client."""

from __future__ import annotations

import dataclasses

import pytest


def test_no_flag_is_taken_for_an_abbreviation_and_every_serve_setting_is_one_documented_flag():
    from autagent.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["serve", "--reasoner", "embedded", "--api-key", "K"])
    assert args.api_key_env is None or args.api_key_env == "OPENAI_API_KEY"  # once an abbreviation of it
    for argv in (["serve", "--api-key-e", "X"], ["tools", "run", "a.wav", "--no-c"], ["eval", "--data", "x"]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)

    from autagent.serve.options import ServeOptions, field_docs, from_args

    options = from_args(parser.parse_args(["serve", "--reasoner", "embedded", "--api-key", "K", "--max-audio-mb", "2"]))
    assert options.api_key == "K" and options.api_key_env == "OPENAI_API_KEY" and options.max_audio_bytes == 2 << 20
    serve = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "serve")[1]
    dests = {a.dest for a in serve._actions}
    docs = field_docs(ServeOptions)
    for item in dataclasses.fields(ServeOptions):
        assert item.name in dests and len(docs.get(item.name, "")) > 10, item.name


class _Refusing:
    """A stand-in upstream that answers every request with ``status`` (401: it refuses the service's key)."""

    def __init__(self, status: int):
        import json

        from helpers.serve import FakeUpstream, QuietHandler

        class Handler(QuietHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                self.rfile.read(int(self.headers["Content-Length"]))
                body = json.dumps({"error": {"message": "bad key", "type": "auth"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = FakeUpstream(Handler)
        self.url = self.server.url


def _pass_through(tmp_path, upstream: str, **settings):
    """A service with no plugin in front of ``upstream`` (nothing to load: fast)."""
    from helpers.serve import InThread

    from autagent.config import load_config
    from autagent.serve import build, create_app

    config = load_config(None, {"answer_cache_dir": str(tmp_path / "answers"), "tools.cache_dir": str(tmp_path / "t")})
    service = build(
        config,
        upstream=upstream,
        audio_dir=str(tmp_path / "audio"),
        upstream_retries=0,
        upstream_timeout_s=10,
        **settings,
    )
    return InThread(create_app(service))


BODY = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def test_the_api_key_is_asked_on_http_and_realtime_and_health_tells_nothing_of_the_upstream(tmp_path, monkeypatch):
    import httpx
    from helpers.serve import Upstream
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    echo = Upstream("echo")
    service = _pass_through(tmp_path, echo.url, api_key="s3cret-key")
    url = service.url + "/v1/chat/completions"
    ws = service.url.replace("http://", "ws://") + "/v1/realtime"
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-key"}):
            reply = httpx.post(url, json=BODY, headers=headers, timeout=30)
            assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key", reply.text
        assert httpx.get(service.url + "/metrics").status_code == 401
        assert len(echo.seen) == 0
        ok = httpx.post(url, json=BODY, headers={"Authorization": "Bearer s3cret-key"}, timeout=30)
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "ok"
        health = httpx.get(service.url + "/health")  # no key needed, nothing told about the upstream
        assert health.status_code == 200 and "127.0.0.1" not in health.text and "upstream" not in health.json()
        with pytest.raises(InvalidStatus) as refused:
            connect(ws, open_timeout=10)
        assert refused.value.response.status_code == 403
        with connect(ws, additional_headers={"Authorization": "Bearer s3cret-key"}, open_timeout=10) as socket:
            assert '"session.created"' in socket.recv(timeout=10)
    finally:
        service.stop()
        echo.httpd.shutdown()

    from autagent.cli import build_parser
    from autagent.serve.options import from_args

    monkeypatch.setenv("AUTAGENT_API_KEY", "from-the-environment")
    assert from_args(build_parser().parse_args(["serve", "--reasoner", "embedded"])).api_key == "from-the-environment"


def test_a_foreign_host_a_foreign_origin_and_a_text_plain_post_are_refused(tmp_path):
    import httpx
    from helpers.serve import Upstream
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    echo = Upstream("echo")
    service = _pass_through(tmp_path, echo.url, allowed_origins=["https://app.example"])
    url = service.url + "/v1/chat/completions"
    ws = service.url.replace("http://", "ws://") + "/v1/realtime"
    try:
        rebound = httpx.post(url, json=BODY, headers={"Host": "attacker.example"}, timeout=30)
        assert rebound.status_code == 400 and rebound.json()["error"]["code"] == "invalid_host"
        import json

        plain = httpx.post(url, content=json.dumps(BODY), headers={"Content-Type": "text/plain"}, timeout=30)
        assert plain.status_code == 415 and "application/json" in plain.json()["error"]["message"]
        assert len(echo.seen) == 0
        with pytest.raises(InvalidStatus):
            connect(ws, origin="https://evil.example", open_timeout=10)
        for origin in (None, "https://app.example"):  # a program (no Origin) and the allowed page
            with connect(ws, origin=origin, open_timeout=10) as socket:
                assert '"session.created"' in socket.recv(timeout=10)
        assert httpx.post(url, json=BODY, timeout=30).status_code == 200
    finally:
        service.stop()
        echo.httpd.shutdown()


def test_an_upstream_refusing_the_services_key_is_a_502_not_the_clients_401(tmp_path):
    import httpx

    upstream = _Refusing(401)
    service = _pass_through(tmp_path, upstream.url)
    try:
        reply = httpx.post(service.url + "/v1/chat/completions", json=BODY, timeout=30)
        assert reply.status_code == 502 and "credentials" in reply.json()["error"]["message"], reply.text
        assert "127.0.0.1" not in reply.text
    finally:
        service.stop()
        upstream.server.httpd.shutdown()


def test_mcp_over_http_asks_for_the_key(tmp_path, click_wav):
    import asyncio
    from pathlib import Path

    import httpx2
    from helpers.serve import InThread
    from mcp import Client
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    from autagent.config import load_config
    from autagent.serve.mcp_server import McpOptions, build_server, http_app, open_tools

    config = load_config(None, {"tools.cache_dir": str(tmp_path / "t"), "tools.executor": "local"})
    options = McpOptions("http", [str(Path(click_wav[0]).parent)], str(tmp_path / "audio"), api_key="mcp-key")
    service = InThread(http_app(build_server(open_tools(config, None, options)), options))

    async def listed(headers):
        client = create_mcp_http_client(headers=headers)
        async with Client(streamable_http_client(service.url + "/mcp", http_client=client)) as session:
            return [t.name for t in (await session.list_tools()).tools]

    try:
        assert "tempo" in asyncio.run(listed({"Authorization": "Bearer mcp-key"}))
        refused = httpx2.post(service.url + "/mcp", json={}, headers={"Accept": "application/json"})
        assert refused.status_code == 401
    finally:
        service.stop()

"""``autagent mcp`` over HTTP (issue 49): Host and Origin checked on every address, as ``serve``'s; a
playlist sent as a clip never reads the file it names; a refused clip leaves the clips folder; no
error names the server's folders.  Every test here fails on 2e698d3."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest
import soundfile as sf
from helpers.serve import InThread

from autagent.config import load_config
from autagent.reasoners.messages import BadRequest
from autagent.serve.mcp_server import AcousticTools, McpOptions, build_server, http_app, open_tools

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _tools(tmp_path, allowed) -> AcousticTools:
    config = load_config(None, {"tools.cache_dir": str(tmp_path / "t"), "tools.executor": "local"})
    return open_tools(config, None, McpOptions("http", [str(a) for a in allowed], str(tmp_path / "audio")))


def test_mcp_over_http_on_any_address_checks_host_and_origin(tmp_path):
    tools = _tools(tmp_path, [])
    server = InThread(http_app(build_server(tools), tools.options, host="0.0.0.0"))  # as bound to every address
    try:
        foreign = httpx.post(server.url + "/mcp", json=INITIALIZE, headers={**ACCEPT, "Host": "attacker.example"})
        assert foreign.status_code == 400 and foreign.json()["error"]["code"] == "invalid_host"
        page = httpx.post(server.url + "/mcp", json=INITIALIZE, headers={**ACCEPT, "Origin": "http://attacker.example"})
        assert page.status_code == 403 and page.json()["error"]["code"] == "invalid_origin"
        ours = httpx.post(server.url + "/mcp", json=INITIALIZE, headers=ACCEPT)
        assert ours.status_code == 200, ours.text
    finally:
        server.stop()


def test_an_hls_clip_reads_nothing_and_a_refused_clip_leaves_the_folder(tmp_path):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    t = np.arange(22050 * 4) / 22050
    beats = (np.sin(2 * np.pi * 2 * t) > 0.99).astype(np.float32) * 0.8  # clicks at 120 BPM
    secret = outside / "secret.flac"
    sf.write(str(secret), beats, 22050)
    tools = _tools(tmp_path, [allowed])
    hls = f"#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:4\n#EXTINF:4.0,\nfile://{secret}\n#EXT-X-ENDLIST\n"
    playlist = base64.b64encode(hls.encode()).decode()  # the old decoder played it: the secret's beats
    for audio in (playlist, f"data:audio/wav;base64,{playlist}"):
        with pytest.raises(BadRequest) as refused:
            tools.run("tempo", audio, None, None)
        assert "(playlist)" in str(refused.value) and str(secret) not in str(refused.value)
    garbage = base64.b64encode(b"RIFF\x00\x00\x00\x00WAVEjunk" * 100).decode()
    with pytest.raises(BadRequest) as refused:
        tools.run("tempo", garbage, None, None)
    assert str(tmp_path) not in str(refused.value)
    assert [p for p in (tmp_path / "audio").iterdir() if not p.name.startswith(".")] == []
    with pytest.raises(BadRequest) as refused:
        tools.run("tempo", str(secret), None, None)
    assert "outside the folders" in str(refused.value) and str(allowed) not in str(refused.value)

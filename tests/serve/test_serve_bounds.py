"""Every byte the service writes is bounded: a refused clip is deleted at once (never left untracked
by the clips folder's bound), the MCP server's clips folder and the tool-record cache are kept under
their sizes; a client's mistake is a 400, and a failure of ours a 500 that tells nothing of the
service's insides."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from helpers.serve import TOOLS, InThread, Upstream, chat_message, router_plugin, service_options, start_service


@pytest.fixture(scope="module")
def quiet_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("bounds") / "quiet", [-5.0] * len(TOOLS))


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def _wav(path: Path, samples, rate=16000) -> Path:
    import soundfile as sf

    sf.write(str(path), np.asarray(samples, np.float32), rate)
    return path


def test_refused_clips_leave_nothing_on_disk(quiet_plugin, tmp_path, click_wav):
    echo = Upstream("echo")
    service = start_service(quiet_plugin, tmp_path, upstream=echo.url, max_audio_seconds=5.0)
    url = service.url + "/v1/chat/completions"
    rng = np.random.default_rng(0)
    refused = [
        base64.b64encode(b"RIFF" + rng.bytes(20_000)).decode(),  # undecodable
        base64.b64encode(_wav(tmp_path / "silent.wav", np.zeros(16000)).read_bytes()).decode(),
        base64.b64encode(Path(click_wav[0]).read_bytes()).decode(),  # 10 s: too long
    ]
    text = {"type": "text", "text": "Which is it?\n(A) one\n(B) two"}
    try:
        for k in range(6):
            data = refused[k % 3] if k < 3 else base64.b64encode(b"RIFF" + rng.bytes(20_000 + k)).decode()
            body = {"model": "m", "messages": [{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}, text]}]}  # fmt: skip
            reply = httpx.post(url, json=body, timeout=60)
            assert reply.status_code == 400, reply.text
        assert _files(tmp_path / "audio") == []  # once: every refused clip stayed, untracked, until restart
        long_subtype = {"type": "audio_url", "audio_url": {"url": f"data:audio/{'x' * 300};base64,UklGRg=="}}
        reply = httpx.post(url, json={"model": "m", "messages": [{"role": "user", "content": [long_subtype, text]}]})
        assert reply.status_code == 400 and "data:audio/<format> must be one of" in reply.text  # was a 500
    finally:
        service.stop()
        echo.httpd.shutdown()


def test_a_clip_refused_by_a_reasoner_in_process_is_deleted(quiet_plugin, tmp_path, melody_wav):

    from autagent.config import load_config
    from autagent.serve import build, create_app

    config = load_config(None, {"answer_cache_dir": str(tmp_path / "answers"), "tools.cache_dir": str(tmp_path / "t")})
    service = InThread(create_app(build(config, reasoner="embedded", audio_dir=str(tmp_path / "audio"))))
    try:
        one_choice = {"model": "m", "messages": chat_message(melody_wav[0], "Which is it?", ["one"])}
        reply = httpx.post(service.url + "/v1/chat/completions", json=one_choice, timeout=120)
        assert reply.status_code == 400 and "at least two choices" in reply.text
        assert _files(tmp_path / "audio") == []
    finally:
        service.stop()


def test_a_failure_of_ours_is_a_500_that_names_no_path(quiet_plugin, tmp_path, melody_wav):

    from autagent.serve import create_app

    echo = Upstream("echo")
    service = service_options(quiet_plugin, tmp_path, upstream=echo.url)

    def broken(messages, query):
        raise OSError(36, "File name too long", "/srv/secret/clips/" + "x" * 300)

    service.plugin.augment_query = broken
    app = InThread(create_app(service))
    try:
        body = {"model": "m", "messages": chat_message(melody_wav[0], "Which is it?", ["one", "two"])}
        reply = httpx.post(app.url + "/v1/chat/completions", json=body, timeout=60)
        assert reply.status_code == 500 and "reference" in reply.json()["error"]["message"]
        assert "/srv/secret" not in reply.text and "File name" not in reply.text
        assert _files(tmp_path / "audio") != []  # an accepted clip is kept (the cache), within the bound
    finally:
        app.stop()
        echo.httpd.shutdown()


def test_the_mcp_clips_folder_is_bounded_and_a_path_is_checked_as_it_is_opened(tmp_path, melody_wav):
    from autagent.config import load_config
    from autagent.reasoners.messages import BadRequest
    from autagent.serve.mcp_server import McpOptions, open_tools

    config = load_config(None, {"tools.cache_dir": str(tmp_path / "t"), "tools.executor": "local"})
    clip_bytes = Path(melody_wav[0]).stat().st_size
    options = McpOptions(
        "http", [str(tmp_path / "allowed")], str(tmp_path / "audio"), audio_cache_bytes=3 * clip_bytes + 100
    )
    tools = open_tools(config, None, options)
    import soundfile as sf

    samples, rate = sf.read(str(melody_wav[0]))
    for k in range(6):
        path = _wav(tmp_path / f"c{k}.wav", samples[:, 0] * (0.5 + 0.05 * k), rate)
        record = tools.run("tempo", base64.b64encode(path.read_bytes()).decode(), None, None)
        assert "error" not in record
        assert sum(p.stat().st_size for p in _files(tmp_path / "audio")) <= 3 * clip_bytes + 100

    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "link.wav").symlink_to(melody_wav[0])  # resolves outside: refused, and never opened
    with pytest.raises(BadRequest, match="outside the folders"):
        with tools.clip(str(allowed / "link.wav")):
            pass
    (tmp_path / "exists").write_text("x")
    answers = []
    for name in ("exists", "does-not-exist"):  # a bare name: is a file there? the answer must not tell
        with pytest.raises(BadRequest) as refused:
            with tools.clip(name):
                pass
        answers.append(str(refused.value).replace(name, "NAME"))
    assert answers[0] == answers[1]


def test_the_tool_record_cache_stays_under_its_size_with_two_writers(tmp_path):
    from tools.cache import ToolCache

    cap = 40_000
    writers = [ToolCache(tmp_path / "cache", cap), ToolCache(tmp_path / "cache", cap)]  # two processes' caches
    record = {"tool": "tempo", "output": {"beats": list(range(200))}}
    writers[0].put("kept", "tempo", "b", "1", record)
    for k in range(300):
        writers[k % 2].put(f"clip{k}", "tempo", "b", "1", record)
        if k % 10 == 0:
            assert writers[0].get("kept", "tempo", "b", "1") is not None  # used often: kept
        size = sum(p.stat().st_size for p in (tmp_path / "cache").glob("*/*/*.json"))
        assert size <= cap + cap // 16 + 2000, (k, size)
    assert writers[0].get("kept", "tempo", "b", "1") == record
    assert writers[0].get("clip0", "tempo", "b", "1") is None  # the oldest went
    assert sum(w.evicted for w in writers) > 200
    assert json.loads(json.dumps(record)) == record


@pytest.mark.parametrize(
    "part",
    [
        {"type": "audio_url", "audio_url": 7},
        {"type": "audio_url", "audio_url": "data:audio/wav;base64,AAAA"},
        {"type": "input_audio", "input_audio": [1]},
        {"type": "input_audio", "input_audio": "AAAA"},
    ],
)
def test_an_audio_part_that_is_not_an_object_is_a_400_not_a_500(quiet_plugin, tmp_path, part):
    echo = Upstream("echo")
    service = start_service(quiet_plugin, tmp_path, upstream=echo.url)
    try:
        messages = [{"role": "user", "content": [part, {"type": "text", "text": "Which? (A) one (B) two"}]}]
        reply = httpx.post(service.url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=60)
        assert reply.status_code == 400 and "must be an object" in reply.json()["error"]["message"], reply.text
        assert echo.seen == []
    finally:
        service.stop()
        echo.httpd.shutdown()

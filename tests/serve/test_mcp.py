"""``autagent mcp``: the acoustic tools as an MCP server, driven in process by the official SDK's own
client (and once over streamable HTTP): every tool listed and called, with the records ``autagent
tools run`` prints; ``select`` and ``list_tools``; bad input an MCP error result naming the problem,
the server still answering afterwards."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
import torch

from autagent.plugin.manifest import PluginTarget
from autagent.policies.router.export import RouterParts, export_router
from autagent.policies.router.features import Featurizer
from autagent.policies.router.model import Router, RouterConfig

TOOLS = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers")
FIXTURES = Path(__file__).resolve().parents[2] / ".cache" / "tests" / "tools"


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    torch.manual_seed(0)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(), len(TOOLS))
    with torch.no_grad():
        router.net[-1].bias.copy_(torch.tensor([5.0, -5.0, -5.0, 5.0, -5.0, -5.0, -5.0]))  # asr and tempo
    return export_router(
        PluginTarget(tmp_path_factory.mktemp("mcp") / "p", TOOLS, "embedded", {}, 30.0, {}),
        RouterParts(router, featurizer),
    )


def _tools(tmp_path, plugin=None, **options):
    from autagent.config import load_config
    from autagent.serve.mcp_server import McpOptions, open_tools

    config = load_config(None, {"tools.cache_dir": str(FIXTURES), "tools.executor": "local"})
    return open_tools(config, plugin, McpOptions(audio_dir=str(tmp_path / "audio"), **options))


def _call(server, calls):
    """Results of ``[(tool, arguments)]`` through one SDK client session, and the tools it listed."""
    from mcp import Client

    async def session():
        async with Client(server) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            return listed, [await client.call_tool(name, arguments) for name, arguments in calls]

    return asyncio.run(session())


def _text(result) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def test_every_tool_is_listed_and_gives_the_record_autagent_tools_run_prints(tmp_path, plugin, tiny_bench, capsys):
    from autagent.cli import main
    from autagent.serve.mcp_server import build_server

    sample = tiny_bench["test"][0]
    tools = _tools(tmp_path, plugin)
    listed, results = _call(
        build_server(tools),
        [(t, {"audio": sample.audio}) for t in TOOLS]
        + [
            ("select", {"audio": sample.audio, "question": sample.question, "choices": list(sample.choices)}),
            ("list_tools", {}),
        ],
    )
    assert listed == [*TOOLS, "select", "list_tools"]
    cache = ["--set", f"tools.cache_dir={FIXTURES}", "--executor", "local"]
    assert main(["tools", "run", sample.audio, "--tools", ",".join(TOOLS), *cache]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [r.structured_content for r in results[: len(TOOLS)]] == printed
    assert not any(r.is_error for r in results)
    selection = results[len(TOOLS)].structured_content
    assert selection["tools"] == ["asr", "tempo"] and set(selection["probabilities"]) == set(TOOLS)
    assert selection["plugin"] == json.loads((plugin / "manifest.json").read_text())["content_hash"]
    listing = results[-1].structured_content["tools"]
    assert [t["id"] for t in listing] == list(TOOLS) and {t["plugin"] for t in listing} == {"learned"}


def test_a_clip_as_base64_or_a_data_url_and_a_window_give_the_pools_records(tmp_path, click_wav):
    from autagent.serve.mcp_server import build_server
    from tools.clip_window import Window
    from tools.pool import PoolConfig, ToolPool

    raw = base64.b64encode(Path(click_wav[0]).read_bytes()).decode()
    _, (by_path, by_bytes, by_url, window) = _call(
        build_server(_tools(tmp_path)),
        [
            ("tempo", {"audio": str(click_wav[0])}),
            ("tempo", {"audio": raw}),
            ("tempo", {"audio": f"data:audio/wav;base64,{raw}"}),
            ("tempo", {"audio": str(click_wav[0]), "start": 2, "end": 6}),
        ],
    )
    assert by_path.structured_content == by_bytes.structured_content == by_url.structured_content
    pool = ToolPool(PoolConfig(executor="local", cache_dir=str(FIXTURES), enabled=["tempo"]))
    assert window.structured_content == pool.run(str(click_wav[0]), ["tempo"], Window(2.0, 6.0))["tempo"]


def test_bad_input_is_an_mcp_error_naming_the_problem_and_the_server_stays_up(tmp_path, click_wav, melody_wav):
    from autagent.serve.mcp_server import build_server

    allowed = tmp_path / "allowed"
    allowed.mkdir()
    inside = allowed / "clip.wav"
    inside.write_bytes(Path(melody_wav[0]).read_bytes())
    (allowed / "escape.wav").symlink_to(click_wav[0])  # a link out of the folder is outside it
    garbage = allowed / "garbage.wav"
    garbage.write_bytes(b"RIFF" + bytes(range(256)) * 40)
    small = 200_000
    big = base64.b64encode(Path(click_wav[0]).read_bytes()).decode()  # 10 s: over 200 kB
    cases = [
        ({"audio": str(allowed / "missing.wav")}, "missing.wav: file not found"),
        ({"audio": str(garbage)}, "garbage.wav: cannot decode audio"),
        ({"audio": str(click_wav[0])}, "outside the folders this server may read (--allow-dir"),
        ({"audio": str(allowed / "escape.wav")}, "outside the folders this server may read"),
        ({"audio": big}, f"over the {small}-byte limit (--max-audio-mb"),
        ({"audio": "not base64 at all!!"}, "neither a file path, a data: URL nor valid base64"),
        ({"audio": "data:text/plain,hello"}, "a data: URL must look like data:audio/<format>;base64,<bytes>"),
        ({"audio": str(inside), "start": 3, "end": 1}, "end (1 s) must be after start (3 s)"),
        ({"audio": str(inside), "start": 60}, "the window starts at 60 s, after the clip ends"),
    ]
    server = build_server(_tools(tmp_path, transport="http", allow_dirs=[str(allowed)], max_audio_bytes=small))
    _, results = _call(server, [("tempo", arguments) for arguments, _ in cases] + [("tempo", {"audio": str(inside)})])
    for (arguments, words), result in zip(cases, results):
        assert result.is_error and words in _text(result), (arguments, _text(result))
    assert not results[-1].is_error and results[-1].structured_content["tool"] == "tempo"
    _, (refused,) = _call(build_server(_tools(tmp_path, transport="http")), [("tempo", {"audio": str(inside)})])
    assert refused.is_error and "paths are refused over HTTP unless the server names folders" in _text(refused)
    _, (stdio,) = _call(build_server(_tools(tmp_path)), [("tempo", {"audio": str(click_wav[0])})])
    assert not stdio.is_error  # over stdio any file the user can read
    _, (no_plugin,) = _call(server, [("select", {"audio": str(inside), "question": "Which?"})])
    assert no_plugin.is_error and "select needs a plugin" in _text(no_plugin)


def test_the_server_answers_over_streamable_http(tmp_path, click_wav):
    """The same server on a loopback port, reached by the SDK's client through its HTTP transport."""
    from helpers.serve import InThread
    from mcp import Client

    from autagent.serve.mcp_server import build_server

    app = build_server(_tools(tmp_path, transport="http", allow_dirs=[str(Path(click_wav[0]).parent)]))
    service = InThread(app.streamable_http_app())

    async def session():
        async with Client(service.url + "/mcp") as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            return listed, await client.call_tool("tempo", {"audio": str(click_wav[0])})

    try:
        listed, result = asyncio.run(session())
    finally:
        service.stop()
    assert "tempo" in listed and result.structured_content["output"]["bpm"] == pytest.approx(120, abs=6)


@pytest.mark.slow  # `autagent mcp` in a new process (it loads the encoders)
def test_autagent_mcp_over_stdio_as_an_agent_launches_it(plugin, click_wav, tmp_path):
    import os
    import sys

    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    root = Path(__file__).resolve().parents[2]
    command = ["-m", "autagent.cli", "mcp", "--plugin", str(plugin), "--set", f"tools.cache_dir={FIXTURES}"]
    params = StdioServerParameters(command=sys.executable, args=command, env=dict(os.environ), cwd=str(root))
    errors = open(tmp_path / "server-stderr.txt", "w")  # a real file: pytest's captured stderr has no descriptor

    async def session():
        async with Client(stdio_client(params, errlog=errors)) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            missing = await client.call_tool("tempo", {"audio": "/no/such/clip.wav"})
            return listed, missing, await client.call_tool("tempo", {"audio": str(click_wav[0])})

    try:
        listed, missing, result = asyncio.run(session())
    finally:
        errors.close()
    assert listed == [*TOOLS, "select", "list_tools"], (tmp_path / "server-stderr.txt").read_text()[-2000:]
    assert missing.is_error and "/no/such/clip.wav: file not found" in _text(missing)
    assert result.structured_content["output"]["bpm"] == pytest.approx(120, abs=6)

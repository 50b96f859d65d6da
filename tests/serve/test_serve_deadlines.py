"""Nothing waits for ever: a tool call in process that hangs is given up on at ``tools.timeout_s``
(the next call served, its lock not held); an agentic request ends at its deadline and runs at most
``--max-tool-calls`` calls a round; a body dripped slowly is refused at ``--body-timeout-s`` without
holding a slot; a call to a tool nobody offered never reaches the client."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest
from helpers.serve import (
    TOOLS,
    ScriptUpstream,
    Upstream,
    chat_message,
    router_plugin,
    start_agentic_service,
    start_service,
    tool_call,
)


@pytest.fixture(scope="module")
def quiet_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("deadlines") / "quiet", [-5.0] * len(TOOLS))


def test_a_hung_tool_in_process_times_out_and_the_next_call_is_served(tmp_path, melody_wav, click_wav):
    from helpers.suicidal_tool import fault_tool

    from tools.pool import PoolConfig, ToolPool
    from tools.registry import register

    calls = []

    def hang_on_melody(model, audio, settings):
        calls.append(Path(audio.path).name)
        if Path(audio.path).name == Path(melody_wav[0]).name:
            time.sleep(20)  # a decoder that hangs on one clip
        return {"seconds": round(audio.duration, 3)}

    register(fault_tool("hangs_on_one", "Hangs on one clip (a test tool).", hang_on_melody), "tests")
    pool = ToolPool(PoolConfig(executor="local", enabled=["hangs_on_one"], cache_dir=str(tmp_path), timeout_s=1.0))
    pool.runner.run("hangs_on_one", str(click_wav[0]))  # loading and resampling warmed, without a deadline
    started = time.perf_counter()
    hung = pool.run(str(melody_wav[0]), ["hangs_on_one"])["hangs_on_one"]
    assert "timed out after 1s" in hung["error"] and time.perf_counter() - started < 5
    started = time.perf_counter()
    served = pool.run(str(click_wav[0]), ["hangs_on_one"])["hangs_on_one"]  # the hung call holds the old lock
    assert "error" not in served and time.perf_counter() - started < 5, (served.get("error"), calls)


def test_an_agentic_round_runs_at_most_the_cap_and_unknown_tools_never_reach_the_client(
    tmp_path, quiet_plugin, click_wav
):
    many = [tool_call("tempo", json.dumps({"start": k * 0.1, "end": 5 + k * 0.1}), f"c{k}") for k in range(20)]
    script = lambda body, turn: (  # noqa: E731
        {"content": None, "tool_calls": [*many, tool_call("rm_rf", "{}", "x")]} if turn == 1 else {"content": "done"}
    )
    upstream = ScriptUpstream(script)
    service, _ = start_agentic_service(tmp_path, quiet_plugin, upstream.url, max_tool_calls=3)
    body = {"model": "m", "messages": chat_message(click_wav[0], "Which tempo?", ["60 BPM", "120 BPM"])}
    try:
        reply = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=120)
    finally:
        service.stop()
        upstream.httpd.shutdown()
    assert reply.status_code == 200, reply.text
    info = reply.json()["autagent"]
    ran = [c for c in info["calls"] if "error" not in c]
    assert len(ran) == 3 and sum("over the cap of 3" in c.get("error", "") for c in info["calls"]) == 17
    assert info["unknown"] == ["rm_rf"] and reply.json()["choices"][0]["message"]["content"] == "done"

    def slow(body, turn):
        time.sleep(4)
        return {"content": "late"}

    upstream = ScriptUpstream(slow)
    service, _ = start_agentic_service(tmp_path, quiet_plugin, upstream.url, request_timeout_s=1.0)
    started = time.perf_counter()
    try:
        late = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=120)
    finally:
        service.stop()
        upstream.httpd.shutdown()
    assert late.status_code == 504 and "longer than 1 s" in late.text and time.perf_counter() - started < 4


def test_a_dripped_body_is_refused_at_its_deadline_and_holds_no_slot(quiet_plugin, tmp_path, melody_wav):
    echo = Upstream("echo")
    service = start_service(
        quiet_plugin, tmp_path, upstream=echo.url, max_concurrency=1, max_queue=2, body_timeout_s=2.0
    )
    host, port = service.url.split("//")[1].split(":")
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n{"
    )
    try:
        with socket.create_connection((host, int(port)), timeout=10) as drip:
            drip.sendall(head)  # and nothing more
            started = time.perf_counter()
            body = {"model": "m", "messages": chat_message(melody_wav[0], "Which?", ["one", "two"])}
            ok = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=30)
            assert ok.status_code == 200 and time.perf_counter() - started < 2  # the slot was free meanwhile
            answer = drip.recv(200)
            assert answer.startswith(b"HTTP/1.1 408"), answer
            assert time.perf_counter() - started < 6
    finally:
        service.stop()
        echo.httpd.shutdown()

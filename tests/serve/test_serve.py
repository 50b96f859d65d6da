"""``autagent serve``: a plugin service in front of a reasoner service, both on loopback ports, driven
by the ``openai`` SDK's client; the Python API reproducing the service's upstream prompt; every
hostile request refused with an OpenAI-shaped error while the service stays up; 32 concurrent clients
on a bounded service, none lost."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import torch
from helpers.serve import (
    TOOLS,
    FakeUpstream,
    QuietHandler,
    chat_message,
    post_concurrently,
    router_plugin,
    start_service,
)

from autagent.plugin.manifest import PluginTarget
from autagent.policies.router.export import RouterParts, export_router
from autagent.policies.router.features import Featurizer
from autagent.policies.router.model import Router, RouterConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-plugins")
    calls = router_plugin(root / "asr-tempo", [3.0, -3.0, -3.0, 3.0, -3.0, -3.0])  # always asr and tempo
    quiet = router_plugin(root / "quiet", [-5.0] * len(TOOLS))  # never a tool
    return {"calls": calls, "quiet": quiet}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve(*args, tmp) -> tuple[subprocess.Popen, str]:
    from autagent.testing.serve import spawn

    cache = ["--set", f"answer_cache_dir={tmp / 'answers'}", "--set", f"tools.cache_dir={tmp / 'tools'}"]
    return spawn(*args, *cache, cwd=ROOT)


@pytest.fixture(scope="module")
def services(plugins, tmp_path_factory):
    """An embedded reasoner on one port (it logs the text it is sent) and the plugin service in front of it."""
    tmp = tmp_path_factory.mktemp("services")
    log = tmp / "upstream.jsonl"
    upstream, upstream_url = _serve("--reasoner", "embedded", "--request-log", str(log), tmp=tmp)
    front, front_url = _serve("--plugin", str(plugins["calls"]), "--upstream", upstream_url + "/v1", tmp=tmp)
    quiet, quiet_url = _serve("--plugin", str(plugins["quiet"]), "--upstream", upstream_url + "/v1", tmp=tmp)
    yield {"upstream": upstream_url, "front": front_url, "quiet": quiet_url, "log": log, "tmp": tmp}
    for process in (front, quiet, upstream):
        process.terminate()
        process.wait(timeout=30)


def _logged(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.slow  # two `autagent serve` processes on loopback ports
def test_the_plugin_service_answers_as_autagent_answer_does(services, plugins, tiny_bench, capsys):
    """Same clips and questions: the openai client through the plugin service gets the answers and tools
    ``autagent answer`` gets; the upstream saw the records in the prompt; streaming gives the same text."""
    from openai import OpenAI

    from autagent.cli import main

    client = OpenAI(base_url=services["front"] + "/v1", api_key="unused")
    for sample in tiny_bench["test"][:4]:
        before = len(_logged(services["log"]))
        reply = client.chat.completions.create(
            model="any", messages=chat_message(sample.audio, sample.question, sample.choices)
        )
        info = reply.model_extra["autagent"]
        assert (
            main(
                [
                    "answer",
                    "--plugin",
                    str(plugins["calls"]),
                    "--audio",
                    sample.audio,
                    "--question",
                    sample.question,
                    "--choices",
                    *sample.choices,
                    "--reasoner",  # the service's; answer's own default is the cascade where it is installed
                    "embedded",
                    "--set",
                    f"answer_cache_dir={services['tmp'] / 'cli-answers'}",
                    "--set",
                    f"tools.cache_dir={services['tmp'] / 'tools'}",
                    "--set",
                    "tools.executor=local",
                ]
            )
            == 0
        )
        expected = json.loads(capsys.readouterr().out)
        assert info["tools"] == expected["tools"] == ["asr", "tempo"] and not info["tools_failed"]
        assert reply.choices[0].message.content == expected["answer"], sample.id
        seen = _logged(services["log"])[before:]
        assert len(seen) == 1 and seen[0]["text"].startswith("The following outputs of acoustic analysis tools")
        assert '"tool": "tempo"' in seen[0]["text"] and sample.question in seen[0]["text"]
        streamed = client.chat.completions.create(
            model="any", stream=True, messages=chat_message(sample.audio, sample.question, sample.choices)
        )
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == expected["answer"]


@pytest.mark.slow  # two `autagent serve` processes on loopback ports
def test_a_toolless_selection_passes_the_request_through_untouched(services, tiny_bench):
    sample = tiny_bench["test"][0]
    messages = chat_message(sample.audio, sample.question, sample.choices)
    before = len(_logged(services["log"]))
    reply = httpx.post(
        services["quiet"] + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=120
    ).json()
    assert reply["autagent"]["tools"] == []
    (seen,) = _logged(services["log"])[before:]
    assert seen["text"] == messages[0]["content"][1]["text"]  # the user's own text, untouched


@pytest.mark.slow  # two `autagent serve` processes on loopback ports
def test_the_python_api_writes_the_services_upstream_prompt_byte_for_byte(services, plugins, tiny_bench, tmp_path):
    from autagent import Plugin

    sample = tiny_bench["test"][1]
    messages = chat_message(sample.audio, sample.question, sample.choices)
    before = len(_logged(services["log"]))
    httpx.post(services["front"] + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=120)
    (seen,) = _logged(services["log"])[before:]
    plugin = Plugin.load(
        plugins["calls"],
        sha256=json.loads((plugins["calls"] / "manifest.json").read_text())["content_hash"],
        audio_dir=tmp_path / "audio",
    )
    augmented = plugin.augment(messages)
    assert augmented[0]["content"][1]["text"] == seen["text"]
    assert augmented[0]["content"][0] == messages[0]["content"][0] and messages[0]["content"][1]["text"] != seen["text"]
    assert plugin.select(sample.audio, sample.question, sample.choices) == ["asr", "tempo"]


@pytest.mark.slow  # two `autagent serve` processes on loopback ports
def test_select_health_and_metrics(services, tiny_bench):
    sample = tiny_bench["test"][0]
    audio = base64.b64encode(Path(sample.audio).read_bytes()).decode()
    reply = httpx.post(
        services["front"] + "/v1/select",
        json={"audio": audio, "format": "wav", "question": sample.question, "choices": list(sample.choices)},
        timeout=60,
    ).json()
    assert reply["tools"] == ["asr", "tempo"] and set(reply["probabilities"]) == set(TOOLS)
    assert httpx.get(services["front"] + "/health").json()["status"] == "ok"
    text = httpx.get(services["front"] + "/metrics").text
    assert 'autagent_requests_total{endpoint="select",status="200"}' in text
    assert 'autagent_stage_seconds_count{stage="select"}' in text


class _Upstream(FakeUpstream):
    """A stand-in upstream: ``junk`` answers HTML, ``slow`` a valid completion after a pause."""

    def __init__(self, mode: str):
        class Handler(QuietHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                self.rfile.read(int(self.headers["Content-Length"]))
                if mode == "slow":
                    time.sleep(0.3)
                    body = json.dumps(
                        {
                            "choices": [
                                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                            ]
                        }
                    ).encode()
                    kind = "application/json"
                else:
                    body, kind = b"<html>502 Bad Gateway</html>", "text/html"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


def _refused(reply, status: int, words: str):
    body = reply.json()
    assert reply.status_code == status and set(body["error"]) >= {"message", "type"}, (reply.status_code, body)
    assert words in body["error"]["message"], body


def test_every_hostile_request_gets_an_openai_shaped_error_and_the_service_stays_up(
    plugins, tmp_path, click_wav, melody_wav
):
    service = start_service(
        plugins["calls"], tmp_path, max_audio_seconds=5.0, max_audio_bytes=600_000, upstream_timeout_s=5.0
    )
    url = service.url + "/v1/chat/completions"
    ok_audio = base64.b64encode(Path(melody_wav[0]).read_bytes()).decode()
    long_audio = base64.b64encode(Path(click_wav[0]).read_bytes()).decode()  # 10 s
    text = {"type": "text", "text": "Which is it?\n(A) one\n(B) two"}

    def message(*parts):
        return {"model": "m", "messages": [{"role": "user", "content": list(parts)}]}

    def audio(data, fmt="wav"):
        return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}

    cases = [
        (message(text), 400, "no audio"),
        (message(audio(base64.b64encode(os.urandom(4000)).decode()), text), 400, "the audio cannot be used"),
        (message(audio(""), text), 400, "missing or empty"),
        (message(audio("not base64!!"), text), 400, "not valid base64"),
        (
            message(audio(base64.b64encode(b"x" * 700_000).decode()), text),
            400,
            "over the 600000-byte limit (--max-audio-mb",
        ),
        (message(audio(long_audio), text), 400, "longer than 5 s"),
        ({"model": "m"}, 400, "messages is required"),
        ({"model": "m", "messages": "hello"}, 400, "messages must be a list, got string"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, 400, "content must be text or a list"),
        (message(audio(ok_audio, "exe"), text), 400, "input_audio.format must be one of"),
        (message({"type": "audio_url", "audio_url": {"url": "file:///etc/passwd"}}, text), 400, "files and paths"),
        (message({"type": "audio_url", "audio_url": {"url": "/tmp/clip.wav"}}, text), 400, "files and paths"),
        (
            message({"type": "audio_url", "audio_url": {"url": "http://127.0.0.1:9/a.wav"}}, text),
            400,
            "--allow-remote-audio",
        ),
    ]
    try:
        for body, status, words in cases:
            _refused(httpx.post(url, json=body, timeout=60), status, words)
            assert httpx.get(service.url + "/health", timeout=10).json()["status"] == "ok"
        _refused(httpx.post(url, content=b"{not json", headers={"Content-Type": "application/json"}), 400, "not JSON")
        good = httpx.post(url, json=message(audio(ok_audio), text), timeout=60)
        assert good.status_code == 200 and good.json()["autagent"]["tools"] == ["asr", "tempo"]
        assert (
            'autagent_request_errors_total{kind="invalid_request_error"} 14.0'
            in httpx.get(service.url + "/metrics").text
        )
    finally:
        service.stop()


def test_an_upstream_that_is_down_or_answers_junk_is_a_502_that_names_no_address(plugins, tmp_path, melody_wav):
    junk = _Upstream("junk")
    down = f"http://127.0.0.1:{_free_port()}/v1"
    body = {"model": "m", "messages": chat_message(melody_wav[0], "Which is it?", ["one", "two"])}
    for upstream, words in ((down, "ConnectionError"), (junk.url, "not JSON")):
        service = start_service(plugins["calls"], tmp_path, upstream=upstream, upstream_timeout_s=5.0)
        try:
            _refused(httpx.post(service.url + "/v1/chat/completions", json=body, timeout=60), 502, "the upstream")
            reply = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=60)
            _refused(reply, 502, words)
            assert upstream.split("/v1")[0] not in reply.text and "127.0.0.1" not in reply.text
            assert httpx.get(service.url + "/health").json()["status"] == "ok"
            assert "autagent_upstream_errors_total 2.0" in httpx.get(service.url + "/metrics").text
        finally:
            service.stop()
    junk.httpd.shutdown()


def test_32_concurrent_clients_on_a_bounded_service_each_get_an_answer_or_a_429(plugins, tmp_path, melody_wav):
    slow = _Upstream("slow")
    service = start_service(
        plugins["quiet"], tmp_path, upstream=slow.url, max_concurrency=2, max_queue=4, upstream_timeout_s=5.0
    )
    body = {"model": "m", "messages": chat_message(melody_wav[0], "Which is it?", ["one", "two"])}
    try:
        replies = post_concurrently(service.url + "/v1/chat/completions", body, 32, timeout=120)
        statuses = [r.status_code for r in replies]
        assert set(statuses) <= {200, 429} and statuses.count(200) >= 2 and statuses.count(429) >= 1, statuses
        assert all(r.headers["Retry-After"] == "1" for r in replies if r.status_code == 429)
        assert all(r.json()["choices"][0]["message"]["content"] == "ok" for r in replies if r.status_code == 200)
        assert httpx.get(service.url + "/health").json()["in_flight"] == 0
    finally:
        service.stop()
        slow.httpd.shutdown()


def test_a_failing_tool_drops_only_its_record(tmp_path, melody_wav):
    """A tool that fails gives an error record: the request is answered with the other
    tool's record, and the reply names the failed one."""
    from helpers.suicidal_tool import fault_tool

    from tools.registry import register

    def broken(model, audio, settings):
        raise RuntimeError("the broken tool always fails")

    register(fault_tool("broken_tool", "Always fails (a test tool).", broken), "tests")
    torch.manual_seed(0)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(init_bias=4.0), 2)
    plugin = export_router(
        PluginTarget(tmp_path / "p", ("tempo", "broken_tool"), "embedded", {}, 30.0, {}),
        RouterParts(router, featurizer),
    )
    service = start_service(plugin, tmp_path, upstream_timeout_s=5.0)
    try:
        reply = httpx.post(
            service.url + "/v1/chat/completions",
            timeout=120,
            json={"model": "m", "messages": chat_message(melody_wav[0], "Which is it?", ["one", "two"])},
        )
        info = reply.json()["autagent"]
        assert reply.status_code == 200 and info["tools"] == ["tempo", "broken_tool"]
        assert "always fails" in info["tools_failed"]["broken_tool"] and "tempo" not in info["tools_failed"]
        assert 'autagent_tool_errors_total{tool="broken_tool"} 1.0' in httpx.get(service.url + "/metrics").text
    finally:
        service.stop()

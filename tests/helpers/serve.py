"""Test doubles of the service tests: a router plugin with chosen biases, a chat message with a clip,
stand-in upstreams (quiet, scripted, or one of a few failure modes), the service on a loopback port in
this process, and clients that post at once."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import torch

from autagent.plugin.manifest import PluginTarget
from autagent.policies.router.export import RouterParts, export_router
from autagent.policies.router.features import Featurizer
from autagent.policies.router.model import Router, RouterConfig

TOOLS = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")
FIXTURES = Path(__file__).resolve().parents[2] / ".cache" / "tests" / "tools"
"""The test fixtures' tool cache (``conftest.py``'s ``tiny_bench`` fills it)."""


def router_plugin(folder: Path, biases, tools=TOOLS) -> Path:
    """A router plugin whose last layer's ``biases`` (one per tool) decide what it selects."""
    torch.manual_seed(0)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(), len(tools))
    with torch.no_grad():
        router.net[-1].bias.copy_(torch.tensor(biases))
    return export_router(
        PluginTarget(folder, tools, "embedded", {}, 30.0, {"name": "serve-test"}), RouterParts(router, featurizer)
    )


def chat_message(path, question: str, choices) -> list:
    """One user message: the clip as ``input_audio``, the question and lettered choices as text."""
    audio = base64.b64encode(Path(path).read_bytes()).decode()
    text = question + "\n" + "\n".join(f"({chr(65 + i)}) {c}" for i, c in enumerate(choices))
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
                {"type": "text", "text": text},
            ],
        }
    ]


class QuietHandler(BaseHTTPRequestHandler):
    """A stand-in server's request handler that logs nothing."""

    def log_message(self, *args):
        pass


class FakeUpstream(threading.Thread):
    """A stand-in OpenAI-compatible upstream on a free loopback port, answering with ``handler``; serving
    from construction on, its base URL (``.../v1``) in ``url``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        super().__init__(daemon=True)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.start()

    def run(self):
        self.httpd.serve_forever()


def post_concurrently(url: str, body: dict, clients: int, timeout: float) -> list:
    """``clients`` threads POST ``body`` to ``url`` at once; their replies, in thread order."""
    replies = [None] * clients

    def client(i):
        replies[i] = httpx.post(url, json=body, timeout=timeout)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return replies


class InThread:
    """The app on a loopback port, served by uvicorn in a thread of this process."""

    def __init__(self, app, limits=None):
        import uvicorn

        from autagent.serve.connections import uvicorn_config

        self.server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", 0, limits, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not (self.server.started and self.server.servers) and time.time() < deadline:
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=30)


def service_options(plugin, tmp: Path, upstream=None, overrides=None, upstream_timeout_s: float = 10.0, **limits):
    """The options of a plugin service in front of ``upstream`` (else the embedded reasoner in process),
    its caches under ``tmp``, tools in process; ``overrides``: run config fields; ``limits``: the
    service's own."""
    from autagent.config import load_config
    from autagent.serve import build

    config = load_config(
        None,
        {
            "answer_cache_dir": str(tmp / "answers"),
            "tools.cache_dir": str(tmp / "tools"),
            "tools.executor": "local",
            **(overrides or {}),
        },
    )
    return build(
        config,
        reasoner=None if upstream else "embedded",
        upstream=upstream,
        plugin=str(plugin),
        audio_dir=str(tmp / "audio"),
        upstream_retries=0,
        upstream_timeout_s=upstream_timeout_s,
        **limits,
    )


def start_service(plugin, tmp, upstream=None, overrides=None, **limits) -> InThread:
    """That service, on a loopback port in this process."""
    from autagent.serve import create_app

    return InThread(create_app(service_options(plugin, tmp, upstream, overrides, **limits)))


class Upstream(FakeUpstream):
    """A stand-in upstream that keeps every body it was sent: ``echo`` answers "ok"; ``drip`` streams one chunk,
    then the rest once ``release`` is set; ``broken`` sends one chunk of a longer declared body and hangs up; ``junk``
    answers HTML; ``flaky`` answers HTML the first time, then as ``echo``; ``empty`` a completion with no choices."""

    def __init__(self, mode: str):
        seen = self.seen = []
        release = self.release = threading.Event()

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server API
                seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                if mode == "junk" or (mode == "flaky" and len(seen) == 1):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", "9")
                    self.end_headers()
                    self.wfile.write(b"<html>502")
                    return
                if mode in ("echo", "flaky", "empty"):
                    choices = (
                        [] if mode == "empty" else [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]
                    )
                    body = json.dumps({"choices": choices}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
                line = lambda text: (
                    f"data: {json.dumps(chunk | {'choices': [{'index': 0, 'delta': {'content': text}}]})}\n\n"
                )  # noqa: E731
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if mode == "broken":
                    self.send_header("Content-Length", "100000")  # more than is ever sent: a cut-off body
                else:
                    self.send_header("Connection", "close")  # the body ends when the connection does
                self.end_headers()
                self.wfile.write(line("o").encode())
                self.wfile.flush()
                if mode == "drip":
                    release.wait(timeout=30)
                    self.wfile.write((line("k") + "data: [DONE]\n\n").encode())
                    self.wfile.flush()
                self.close_connection = True

        super().__init__(Handler)


class ScriptUpstream(FakeUpstream):
    """An OpenAI-compatible upstream that follows a fixed script: ``script(body, turn)`` returns the
    assistant message of each request; every request body is kept in ``seen``."""

    def __init__(self, script):
        seen = self.seen = []

        class Handler(QuietHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                seen.append(body)
                message = script(body, len(seen))
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                reply = {
                    "id": "chatcmpl-script",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)


def tool_call(name, arguments="{}", call_id=None):
    """A tool call as an assistant message holds it."""
    return {"id": call_id or f"call_{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


def start_agentic_service(tmp, plugin=None, upstream=None, reasoner=None, **limits):
    """``autagent serve --agentic`` on a loopback port in this process (the tools' records from the test
    fixtures' cache), and its options."""
    from autagent.config import load_config
    from autagent.serve import build, create_app

    config = load_config(
        None, {"answer_cache_dir": str(tmp / "answers"), "tools.cache_dir": str(FIXTURES), "tools.executor": "local"}
    )
    options = build(
        config,
        reasoner=reasoner,
        upstream=upstream,
        plugin=str(plugin) if plugin else None,
        audio_dir=str(tmp / "audio"),
        upstream_retries=0,
        upstream_timeout_s=30.0,
        agentic=True,
        **limits,
    )
    return InThread(create_app(options)), options

"""A stand-in OpenAI-compatible upstream that misbehaves on purpose (issue 62): the service must hold
its own bounds whatever the upstream does.  Modes:

* ``drip``: a valid completion whose bytes come one every ``DRIP_S`` (the SDK's per-read timeout never fires);
* ``huge``: a valid completion of ``size`` bytes;
* ``long_line``: a streamed reply whose first line is ``size`` bytes;
* ``redirect``: 307 to ``target`` (another server: it must never see the request);
* ``nan``: a completion with ``NaN`` in it (not JSON);
* ``strict``: 400 with its own message (naming a path of its own) unless the last user message's
  text lists choices as ``(A) ...`` lines; then a completion naming what it was shown;
* ``hang_stream``: one streamed line, then nothing for a minute;
* ``echo``: a plain completion;
* ``by_user``: each request as its ``user`` field says (``huge:8388608``: a mode and its size), so
  that a fuzzer draws the upstream's misbehaviour request by request.

Every body it is sent is kept in ``seen``."""

from __future__ import annotations

import json
import time

from helpers.serve import FakeUpstream, QuietHandler

DRIP_S = 0.1
STRICT_REFUSAL = "the prompt sent to /srv/models/audio-7b/chat_template.jinja has no choices: list them as (A) lines"


def completion(text: str) -> dict:
    return {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }


def last_user_text(body: dict) -> str:
    user = [m for m in body.get("messages", []) if m.get("role") == "user"][-1]
    content = user.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")


class HostileUpstream(FakeUpstream):
    def __init__(self, mode: str, size: int = 0, target: str = ""):
        seen = self.seen = []

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def reply(self, status: int, data: bytes, kind: str = "application/json", **headers) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                seen.append(body)
                try:
                    self.answer(body)
                except (BrokenPipeError, ConnectionResetError):  # the service hung up: as it should
                    self.close_connection = True

            def answer(self, body: dict) -> None:
                how, _, many = str(body.get("user", "echo")).partition(":") if mode == "by_user" else (mode, "", "")
                self.act(body, how, int(many) if many.isdigit() else size)

            def act(self, body: dict, mode: str, size: int) -> None:
                if mode == "echo":
                    self.reply(200, json.dumps(completion("ok")).encode())
                elif mode == "drip":
                    data = json.dumps(completion("ok")).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    for byte in data:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(DRIP_S)
                elif mode == "huge":
                    self.reply(200, json.dumps(completion("x" * size)).encode())
                elif mode == "redirect":
                    self.reply(307, b"", Location=target + "/chat/completions")
                elif mode == "nan":
                    self.reply(200, json.dumps(completion("ok") | {"score": float("nan")}).encode())
                elif mode == "strict":
                    text = last_user_text(body)
                    if "\n(A) " not in text:
                        refusal = {"error": {"message": STRICT_REFUSAL, "type": "BadRequestError", "code": 400}}
                        self.reply(400, json.dumps(refusal).encode())
                    else:
                        self.reply(200, json.dumps(completion(text[text.index("\n(A) ") + 1 :])).encode())
                elif mode in ("long_line", "hang_stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
                    text = "x" * size if mode == "long_line" else "o"
                    delta = chunk | {"choices": [{"index": 0, "delta": {"content": text}}]}
                    self.wfile.write(f"data: {json.dumps(delta)}\n\n".encode())
                    self.wfile.flush()
                    if mode == "hang_stream":
                        time.sleep(60)
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.close_connection = True
                else:
                    raise ValueError(f"unknown mode {mode!r}")

        super().__init__(Handler)

"""Answers computed upstream are kept one by one as they arrive, and a malformed reply is an error for
its item alone (issue 62, item 7): a non-string text part or a null log-probability once threw away a
whole batch the server had answered (nothing cached, nothing charged, ``--resume`` paid again).
Against a stand-in server, for both ways of answering (generated text, scored choices).  Every test
here fails on 0169c2d."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from helpers.serve import FakeUpstream

from autagent.data.sample import Sample
from autagent.reasoners import ReasonerConfig, build_reasoner

CHOICES = ("alpha", "beta", "gamma")


class Server(BaseHTTPRequestHandler):
    """/v1/chat/completions answers "alpha", a non-string text part where the question says BROKEN, and
    waits for ``release`` where it says SLOW; /tokenize (a token per character) and /v1/completions with
    echoed log-probabilities, null where the prompt says NULLED."""

    release = threading.Event()

    def log_message(self, *args):
        pass

    def _json(self, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            ids = ([1] if body["add_special_tokens"] else []) + [ord(ch) for ch in body["prompt"]]
            return self._json({"tokens": ids, "count": len(ids)})
        if self.path == "/v1/completions":
            rows = []
            for prompt in body["prompt"]:
                text = "".join(chr(t) for t in prompt if t > 1)
                rows.append([None] * len(prompt) if "NULLED" in text else [None] + [-0.5] * len(prompt))
            return self._json(
                {"choices": [{"index": i, "logprobs": {"token_logprobs": r}} for i, r in enumerate(rows)]}
            )
        text = body["messages"][0]["content"]
        if "SLOW" in text:
            self.release.wait(timeout=30)
        content = [{"type": "text", "text": 5}] if "BROKEN" in text else "alpha"
        return self._json({"choices": [{"message": {"role": "assistant", "content": content}}]})


@pytest.fixture
def server():
    Server.release.clear()
    up = FakeUpstream(Server)
    yield up
    Server.release.set()
    up.httpd.shutdown()


def _reasoner(url: str, folder, scoring: str = "text", per_request: int = 4):
    """Four prompts a request by default: an item's prompts share requests with another's."""
    config = ReasonerConfig(kind="openai")
    config.openai.base_url, config.openai.model, config.openai.audio = url, "toy", "drop"
    config.openai.scoring, config.openai.max_retries, config.openai.prompts_per_request = scoring, 0, per_request
    return build_reasoner(config, folder)


def _asked(*questions: str):
    return [(Sample(f"q{i}", "", f"Which one, {q}?", CHOICES, "alpha"), None) for i, q in enumerate(questions)]


def _cached(folder) -> list[dict]:
    return [json.loads(line) for path in folder.glob("*.jsonl") for line in path.read_text().splitlines()]


@pytest.mark.parametrize("scoring, spoiled", [("text", "BROKEN"), ("logprobs", "NULLED")])
def test_a_malformed_reply_is_an_error_for_its_item_alone(server, tmp_path, scoring, spoiled):
    reasoner = _reasoner(server.url, tmp_path / "answers", scoring)
    replies = reasoner.ask(_asked("first", spoiled, "third", "fourth"))
    assert [r.error is None for r in replies] == [True, False, True, True], replies
    assert replies[1].error.startswith("malformed response") and reasoner.failures == 1
    assert [r.text for r in replies if r.error is None] == ["alpha"] * 3 or scoring == "logprobs"
    assert len(_cached(tmp_path / "answers")) == 3
    reasoner.close()
    again = _reasoner(server.url, tmp_path / "answers", scoring)
    assert [again.is_cached(s, r) for s, r in _asked("first", spoiled, "third", "fourth")] == [True, False, True, True]


@pytest.mark.parametrize("scoring", ["text", "logprobs"])
def test_answers_are_cached_as_they_arrive_not_when_the_batch_ends(server, tmp_path, scoring):
    """The last item of a batch is held by the server; the others are in the cache file meanwhile."""
    reasoner = _reasoner(server.url, tmp_path / "answers", scoring, per_request=3)  # an item a request
    held = "SLOW" if scoring == "text" else "NULLED"
    if scoring == "logprobs":  # scored items arrive with their requests: hold one request back
        original = reasoner.inner.scored.echo

        async def echo(api, prompts):
            if any("NULLED" in "".join(chr(t) for t in p if t > 1) for p in prompts):
                import asyncio

                await asyncio.to_thread(Server.release.wait, 30)
            return await original(api, prompts)

        reasoner.inner.scored.echo = echo
    done = threading.Thread(target=reasoner.ask, args=(_asked("first", "second", held),))
    done.start()
    try:
        deadline = time.time() + 20
        while len(_cached(tmp_path / "answers")) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert len(_cached(tmp_path / "answers")) == 2 and done.is_alive()
    finally:
        Server.release.set()
        done.join(timeout=30)
    assert len(_cached(tmp_path / "answers")) == 2 + (scoring == "text")

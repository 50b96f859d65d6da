"""Requests paced by the server's measured speed (issue 63.5), against a slow stand-in of vLLM's CPU
build: a server whose time for a request grows with the prompt tokens it carries, that works on at most
two requests at once (the others wait their turn), and that goes on with a request whose client has
left.  With the old fixed settings (8 requests at once of 16 prompts, each within timeout_s) every
answer times out; paced, all 40 are answered, and no request is sent while the server still works on
its prompts (vLLM's ``/metrics`` says when it is done).  Every test here fails on cc5a104."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers.serve import FakeUpstream

from autagent.data.sample import Sample
from autagent.reasoners import ReasonerConfig, build_reasoner

CHOICES = ("alpha", "beta", "gamma")
PER_TOKEN_S = 0.0005
"""The stand-in's time per prompt token: a request of 16 prompts of about 170 tokens takes 1.4 s."""


class Slow:
    """The stand-in's state, shared by its handler threads."""

    def __init__(self, metrics: bool):
        self.metrics, self.lock, self.lanes = metrics, threading.Lock(), threading.Semaphore(2)
        self.held: Counter = Counter()  # prompts queued or being scored
        self.resent_in_flight = self.requests = self.running = self.waiting = 0
        self.slower_after, self.factor, self.done = None, 1.0, 0


class Backlogged(FakeUpstream):
    """A stand-in that takes as many connections at once as vLLM's server does (a listen backlog of 5, the
    standard library's, drops a burst's connection attempts: the client's SYN is sent again after 1 s)."""

    def __init__(self, handler):
        threading.Thread.__init__(self, daemon=True)
        server = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 128})
        self.httpd = server(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.start()


def slow_server(state: Slow) -> FakeUpstream:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, data: bytes, kind: str = "application/json") -> None:
            try:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client left: the work was done anyway
                pass

        def do_GET(self):  # noqa: N802 - http.server API
            if self.path != "/metrics" or not state.metrics:
                self.send_error(404)
                return
            with state.lock:
                text = f'vllm:num_requests_running{{model_name="toy"}} {state.running}.0\n'
                text += f'vllm:num_requests_waiting{{model_name="toy"}} {state.waiting}.0\n'
            self._send(("# HELP vllm:num_requests_running ...\n" + text).encode(), "text/plain")

        def do_POST(self):  # noqa: N802 - http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize":
                ids = ([1] if body["add_special_tokens"] else []) + [ord(ch) for ch in body["prompt"]]
                return self._send(json.dumps({"tokens": ids, "count": len(ids)}).encode())
            prompts = [tuple(p) for p in body["prompt"]]
            with state.lock:
                state.requests += 1
                state.resent_in_flight += any(state.held[p] for p in prompts)
                state.held.update(prompts)
                state.waiting += 1
            with state.lanes:
                with state.lock:
                    state.waiting, state.running = state.waiting - 1, state.running + 1
                    factor = state.factor
                time.sleep(PER_TOKEN_S * factor * sum(len(p) for p in prompts))
                with state.lock:
                    state.running -= 1
                    state.held.subtract(prompts)
                    state.done += 1
                    if state.slower_after is not None and state.done >= state.slower_after:
                        state.factor = 10.0  # the machine got busy
            rows = [[None] + [-0.1 if t in p[:j] else -1.0 - t / 1000 for j, t in enumerate(p)][1:] for p in prompts]
            choices = [{"index": i, "text": "x", "logprobs": {"token_logprobs": r}} for i, r in enumerate(rows)]
            self._send(json.dumps({"choices": choices}).encode())

    return Backlogged(Handler)


@pytest.fixture
def stand_in():
    servers = []

    def start(metrics: bool = True) -> tuple[FakeUpstream, Slow]:
        state = Slow(metrics)
        servers.append(slow_server(state))
        return servers[-1], state

    yield start
    for server in servers:
        server.httpd.shutdown()


def _reasoner(url: str, **settings):
    config = ReasonerConfig(kind="openai")
    openai = config.openai
    openai.base_url, openai.model, openai.audio, openai.scoring = url, "toy", "drop", "logprobs"
    openai.timeout_s = 1.0  # vLLM's CPU build at 60 s, scaled down with the stand-in's speed
    for key, value in settings.items():
        setattr(openai, key, value)
    return build_reasoner(config, None)


def _requests(n: int = 40):
    """``n`` items, each shown a record of about 150 characters: prompts of about 200 tokens."""
    said = "the speaker says the chord changes twice and the tempo stays near one hundred and twenty"
    return [
        (
            Sample(f"q{i}", "", f"Which one is it, case {i}?", CHOICES, "beta"),
            [{"tool": "asr", "output": {"text": f"{said} in take {i}"}}],
        )
        for i in range(n)
    ]


def test_the_old_fixed_settings_time_out_where_paced_requests_answer_all_40(stand_in):
    server, state = stand_in()
    fixed = _reasoner(server.url, pacing="fixed", max_retries=0)
    replies = fixed.ask(_requests())
    assert all(r.error == "Timeout" for r in replies), replies  # 16 prompts a request take longer than 1 s
    assert "fixed pacing" in fixed.where

    server, state = stand_in()
    paced = _reasoner(server.url)
    started = time.monotonic()
    replies = paced.ask(_requests())
    took = time.monotonic() - started
    assert [r.error for r in replies] == [None] * 40 and all(r.text in CHOICES for r in replies)
    pacer = paced.inner.pacer
    assert pacer.counts["timeouts"] == 0 and state.resent_in_flight == 0
    assert 1 <= pacer.counts["prompts"] / pacer.counts["requests"] < 16  # requests sized to the speed
    print(f"paced: {took:.1f} s, {paced.where}")
    assert "paced by the server's speed" in paced.where and "prompt tokens/s" in paced.where


def test_a_timed_out_request_is_sent_again_only_once_the_server_is_done_with_it(stand_in):
    """The server gets ten times slower late in the run (a busy machine): requests sized for its old speed time
    out; their prompts go again only once /metrics says nothing is running or waiting, at the new size
    and with longer timeouts, and every item is answered."""
    server, state = stand_in(metrics=True)
    state.slower_after = 30
    reasoner = _reasoner(server.url)
    replies = reasoner.ask(_requests(12))
    pacer = reasoner.inner.pacer
    assert pacer.counts["timeouts"] >= 1, reasoner.where  # the case in point happened
    assert state.resent_in_flight == 0, reasoner.where
    assert [r.error for r in replies] == [None] * 12
    assert pacer.longest > 1.0  # timeouts grew with the speed measured


def test_pacing_settings_are_checked_with_a_one_line_error():
    from autagent.config import ConfigError, load_config

    with pytest.raises((ConfigError, ValueError), match="reasoner.openai.pacing must be one of"):
        load_config(None, {"reasoner.openai.pacing": "fast"})
    with pytest.raises((ConfigError, ValueError), match="max_timeout_s .* must be at least timeout_s"):
        load_config(None, {"reasoner.openai.timeout_s": 120, "reasoner.openai.max_timeout_s": 60})


class Hangs(BaseHTTPRequestHandler):
    """A server that closes every connection without a word (down behind its port), counting them."""

    seen = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802 - http.server API
        with self.lock:
            type(self).seen += 1
        self.close_connection = True


def test_a_server_that_answers_nothing_is_given_up_after_a_few_rounds_not_item_by_item():
    """40 items against a server that drops every request: a few rounds of tries (the SDK's retry each),
    then the rest given up with the same failure, not 40 items asked one after another."""
    Hangs.seen = 0
    server = Backlogged(Hangs)
    try:
        config = ReasonerConfig(kind="openai")
        config.openai.base_url, config.openai.model, config.openai.audio = server.url, "toy", "drop"
        config.openai.max_retries = 1
        reasoner = build_reasoner(config, None)
        replies = reasoner.ask(_requests())
    finally:
        server.httpd.shutdown()
    assert all(r.error and r.error.startswith("ConnectionError") for r in replies), replies
    assert Hangs.seen <= 4 * 2  # four rounds of a request and its retry


def test_logprobs_scoring_never_answers_with_text_when_the_server_could_not_be_asked():
    """A server that drops the first question (whether it scores choices) leaves it undecided: every item
    is an error saying so, none answered with generated text into the cache named for scored choices."""
    Hangs.seen = 0
    server = Backlogged(Hangs)
    try:
        reasoner = _reasoner(server.url, max_retries=0)
        replies = reasoner.ask(_requests(3))
    finally:
        server.httpd.shutdown()
    assert all(r.error.startswith("cannot ask the server whether it scores choices: ConnectionError") for r in replies)
    assert reasoner.inner.scoring_used is None and reasoner.failures == 3

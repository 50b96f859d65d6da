"""The cascade over HTTP against a stand-in server (fast; tests/test_vllm.py runs it against vLLM itself):
the prompts sent are the cascade's layout token for token, scores are calibrated as in process, prompts
go many to a request and each text is tokenized once; a server that cannot echo prompt log-probabilities
is answered with text, and says so.  And the clip as the service's upstream takes it: at 16 kHz, or dropped."""

from __future__ import annotations

import base64
import io
import json
import math
import threading
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest
import soundfile as sf
from helpers.serve import FakeUpstream

from autagent.data.sample import Sample
from autagent.reasoners import ReasonerConfig, build_reasoner
from autagent.reasoners.cascade import CascadeReasonerConfig
from autagent.reasoners.cascade.layout import lay_out, neutral
from autagent.reasoners.messages import BadRequest

BOS = 1


def char_ids(text: str) -> list[int]:
    """The stand-in's tokenizer: one token per character."""
    return [ord(ch) for ch in text]


def toy_logprob(context: list[int], token: int) -> float:
    """The stand-in's model: a token already seen in the context is likely (-0.1), any other is not
    (-1.0 - token / 1000: rarer the larger, so calibration has something to remove)."""
    return -0.1 if token in context else -1.0 - token / 1000


class ScoringServer(BaseHTTPRequestHandler):
    """/tokenize, /v1/completions with echoed log-probabilities, /v1/chat/completions; ``echo`` False:
    a server like OpenAI's (no /tokenize)."""

    echo = True
    seen: dict = {"tokenize": [], "completions": [], "chat": []}
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _json(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        kind = {"/tokenize": "tokenize", "/v1/completions": "completions"}.get(self.path, "chat")
        with self.lock:
            self.seen[kind].append(body)
        if kind == "tokenize":
            if not self.echo:
                return self._json(404, {"detail": "Not Found"})
            ids = ([BOS] if body["add_special_tokens"] else []) + char_ids(body["prompt"])
            return self._json(200, {"tokens": ids, "count": len(ids)})
        if kind == "completions":
            rows = [[None] + [toy_logprob(p[:j], p[j]) for j in range(1, len(p))] + [-0.5] for p in body["prompt"]]
            choices = [{"index": i, "text": "x", "logprobs": {"token_logprobs": r}} for i, r in enumerate(rows)]
            return self._json(200, {"choices": choices})
        text = body["messages"][0]["content"]
        answer = "beta" if "a beta test" in text else "alpha"  # the asr record says it
        return self._json(200, {"choices": [{"message": {"role": "assistant", "content": answer}}]})


@pytest.fixture
def scoring_server():
    for kind in ScoringServer.seen:
        ScoringServer.seen[kind] = []
    ScoringServer.echo = True
    server = FakeUpstream(ScoringServer)
    yield server
    server.httpd.shutdown()


def _reasoner(url: str, tmp_path, per_request: int = 5):
    config = ReasonerConfig(kind="openai")
    config.openai.base_url, config.openai.model = url, "toy"
    config.openai.audio, config.openai.scoring, config.openai.prompts_per_request = "drop", "logprobs", per_request
    config.openai.max_retries = 0
    return build_reasoner(config, tmp_path / "answers")


def _requests():
    tempo = {"tool": "tempo", "output": {"bpm": 120.0}}
    asr = {"tool": "asr", "output": {"text": "a beta test"}}
    samples = [Sample(f"q{i}", "", f"Which one {i}?", ("alpha", "beta", "gamma"), "beta") for i in range(3)]
    return [(samples[0], None), (samples[1], [tempo]), (samples[2], [tempo, asr])]


def test_choices_are_scored_from_the_cascades_layout_and_calibrated_as_in_process(scoring_server, tmp_path):
    reasoner = _reasoner(scoring_server.url, tmp_path)
    requests = _requests()
    replies = reasoner.ask(requests)
    layout = CascadeReasonerConfig()

    def laid(sample, records):
        choices = list(sample.choices)
        return lay_out(char_ids, [BOS], sample.question, choices, records, max_items=4, max_prompt_tokens=384)

    def summed(prompt, ids):
        return sum(toy_logprob(prompt + ids[:k], t) for k, t in enumerate(ids))

    calm = neutral(char_ids, [BOS], layout.neutral_prompt, ["alpha"])
    calm_prompt = [t for _, piece in calm.pieces for t in piece]
    sent = [p for body in ScoringServer.seen["completions"] for p in body["prompt"]]
    for (sample, records), reply in zip(requests, replies):
        prompt = [t for _, piece in laid(sample, records).prompt.pieces for t in piece]
        choice_ids = laid(sample, records).prompt.choices
        scores = [summed(prompt, ids) - summed(calm_prompt, ids) for ids in choice_ids]
        assert all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(reply.scores, scores)), (reply.scores, scores)
        assert reply.text == sample.choices[int(np.argmax(scores))]
        assert all(prompt + ids in sent for ids in choice_ids)  # the cascade's tokens, piece for piece, as ids
    # 3 x 3 choice prompts and 3 neutral ones, 5 to a request; the probe's one before them
    bodies = ScoringServer.seen["completions"]
    assert sorted(len(b["prompt"]) for b in bodies) == [1, 2, 5, 5]
    assert all(b["echo"] and b["max_tokens"] == 1 and b["logprobs"] == 1 for b in bodies)
    assert "scoring logprobs" in reasoner.where
    asked = len(ScoringServer.seen["tokenize"])
    texts = [b["prompt"] for b in ScoringServer.seen["tokenize"] if not b["add_special_tokens"]]
    assert len(texts) == len(set(texts))  # each text asked once
    fresh = [(Sample("q9", "", "Which one 2?", ("alpha", "beta", "gamma"), "beta"), requests[2][1])]
    reasoner.inner.answer_many(fresh)
    assert len(ScoringServer.seen["tokenize"]) == asked  # known texts and known choices' calibration: none asked


def test_a_server_without_prompt_logprobs_is_answered_with_text_and_says_so(scoring_server, tmp_path, caplog):
    ScoringServer.echo = False
    reasoner = _reasoner(scoring_server.url, tmp_path)
    replies = reasoner.ask(_requests())
    assert [r.text for r in replies] == ["alpha", "alpha", "beta"] and all(r.scores is None for r in replies)
    assert "scoring text: the server has no /tokenize" in reasoner.where and "instead" in caplog.text
    sent = [body["messages"][0]["content"] for body in ScoringServer.seen["chat"]]  # in any order: asked at once
    (chat,) = [content for content in sent if "Which one 2?" in content]  # the item with two records
    assert chat.startswith("[asr]") and "[tempo] 120" in chat and "(B) beta" in chat  # the cascade's record lines
    text_config = ReasonerConfig(kind="openai")
    text_config.openai.base_url, text_config.openai.model, text_config.openai.audio = scoring_server.url, "toy", "drop"
    assert reasoner.fingerprint() == build_reasoner(text_config, None).fingerprint()  # what answered: text


def test_logprobs_scoring_needs_the_audio_dropped():
    from autagent.config import ConfigError, load_config

    with pytest.raises((ConfigError, ValueError), match="set reasoner.openai.audio: drop"):
        load_config(None, {"reasoner.kind": "openai", "reasoner.openai.scoring": "logprobs"})
    with pytest.raises((ConfigError, ValueError), match="reasoner.openai.audio must be one of"):
        load_config(None, {"reasoner.openai.audio": "mute"})


def _wav(rate: int, channels: int = 1, seconds: float = 0.5) -> str:
    t = np.arange(int(rate * seconds)) / rate
    tone = 0.3 * np.sin(2 * np.pi * 440 * t)
    buffer = io.BytesIO()
    sf.write(buffer, np.stack([tone] * channels, axis=1), rate, format="WAV", subtype="PCM_16")
    return base64.b64encode(buffer.getvalue()).decode()


def test_the_upstream_gets_clips_at_its_rate_or_none_at_all():
    from autagent.serve.upstream_audio import for_upstream

    clip, at_rate = _wav(22050, channels=2), _wav(16000)
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}},
                {"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{clip}"}},
                {"type": "input_audio", "input_audio": {"data": at_rate, "format": "wav"}},
                {"type": "text", "text": "What is it?"},
            ],
        },
    ]
    sent = for_upstream(messages, "send", 16000)[1]["content"]
    for data in (sent[0]["input_audio"]["data"], sent[1]["audio_url"]["url"].split(",", 1)[1]):
        info = sf.info(io.BytesIO(base64.b64decode(data)))
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16") and abs(
            info.duration - 0.5
        ) < 0.01
    assert sent[2:] == messages[1]["content"][2:]  # already at the rate: as it came
    assert messages[1]["content"][0]["input_audio"]["data"] == clip  # the request itself is not changed
    assert for_upstream(messages, "send", 0) == messages
    dropped = for_upstream(messages, "drop", 16000)
    assert dropped == [messages[0], {"role": "user", "content": "What is it?"}]
    not_audio = {"type": "input_audio", "input_audio": {"data": "bm90IGF1ZGlv", "format": "wav"}}
    with pytest.raises(BadRequest, match=r"messages\[1\].content\[0\]: the audio cannot be used"):
        for_upstream([messages[0], {"role": "user", "content": [not_audio]}], "send", 16000)  # every clip: one policy


def test_the_vllm_launcher_says_what_is_missing(tmp_path, capsys):
    from autagent.cli import main

    assert main(["upstream", "start", "--model", str(tmp_path), "--venv", str(tmp_path / "none")]) == 2
    assert "run `make setup-vllm` first" in capsys.readouterr().err

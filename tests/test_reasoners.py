"""Reasoners: the embedded reader's behaviour, the answer cache, the OpenAI-compatible client
against a local server, prompt rendering and reply matching."""
from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from autagent.data.sample import Sample
from autagent.reasoners import CachedReasoner
from autagent.reasoners.embedded import EmbeddedReasoner, EmbeddedReasonerConfig, flatten
from autagent.reasoners.prompts import match_choice, render


@pytest.fixture(scope="module")
def reasoner():
    return EmbeddedReasoner(EmbeddedReasonerConfig(attention_temperature=0.3, hearing_weight=2.0))


def _sample(path, question, choices, answer, sid="s1"):
    return Sample(id=sid, audio=str(path), question=question, choices=tuple(choices), answer=answer)


def test_flatten_reads_chord_notation_and_spans():
    facts = flatten("chords", [{"start": 0.0, "end": 2.0, "chord": "A:min"}], 10)
    assert facts[0].text == "chords A minor" and facts[0].span == (0.0, 2.0)


def test_embedded_reads_the_relevant_record(reasoner, chord_wav):
    sample = _sample(chord_wav[0], "Which chord is played at 5.0 seconds?", ["C major", "A minor", "F major", "G major"], "F major")
    chords = {"tool": "chords", "output": [{"start": 0.0, "end": 2.0, "chord": "C:maj"}, {"start": 2.0, "end": 4.0, "chord": "A:min"},
                                           {"start": 4.0, "end": 6.0, "chord": "F:maj"}, {"start": 6.0, "end": 8.0, "chord": "G:maj"}]}
    assert reasoner.answer(sample, [chords]) == "F major"
    moved = dict(sample.__dict__, question="Which chord is played at 1.0 seconds?")
    assert reasoner.answer(Sample(**moved), [chords]) == "C major"  # temporal grounding, same record


def test_embedded_hears_gist_without_tools(reasoner, speech_wav, music_wav):
    choices = ["speech", "music", "environmental sound"]
    assert reasoner.answer(_sample(speech_wav[0], "What kind of audio is this recording?", choices, "speech"), None) == "speech"
    assert reasoner.answer(_sample(music_wav, "What kind of audio is this recording?", choices, "music"), None) == "music"


def test_irrelevant_records_can_mislead(reasoner, tiny_bench):
    """Averaged over a benchmark, all tools do worse than the one relevant tool (attention dilution)."""
    from autagent.scoring import is_correct

    records = tiny_bench["records"]
    tool_samples = [s for s in tiny_bench["train"] if s.meta["tools"]]
    relevant = sum(is_correct(s, reasoner.answer(s, [records[s.id][t] for t in s.meta["tools"]])) for s in tool_samples)
    everything = sum(is_correct(s, reasoner.answer(s, list(records[s.id].values()))) for s in tool_samples)
    none = sum(is_correct(s, reasoner.answer(s, None)) for s in tool_samples)
    assert relevant > everything and relevant > none


def test_answer_cache_persists_and_survives_a_torn_line(reasoner, tmp_path, speech_wav):
    sample = _sample(speech_wav[0], "What kind of audio is this recording?", ["speech", "music"], "speech")
    first = CachedReasoner(reasoner, tmp_path)
    assert first.answer(sample, None) == "speech" and first.calls == 1
    first.close()
    cache_file = next(tmp_path.glob("*.jsonl"))
    with open(cache_file, "a") as handle:
        handle.write('{"key": "torn')
    second = CachedReasoner(reasoner, tmp_path)
    assert second.answer(sample, None) == "speech" and second.calls == 0 and second.hits == 1


def test_prompts_and_reply_matching():
    choices = ["C major", "A minor"]
    assert "Tool outputs" not in render("Which chord?", choices, None)
    with_tools = render("Which chord?", choices, [{"tool": "chords", "output": [{"chord": "A:min"}], "backend": "x", "version": "y"}])
    assert '"tool": "chords"' in with_tools and "backend" not in with_tools
    assert match_choice("(B)", choices) == "A minor" and match_choice("It is C major.", choices) == "C major"
    assert match_choice("no idea", choices) is None and match_choice(None, choices) is None


class _Handler(BaseHTTPRequestHandler):
    requests: list = []
    fail_first: set = set()
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = body["messages"][0]["content"][1]["text"]
        with self.lock:
            type(self).requests.append({"auth": self.headers.get("Authorization"), "body": body})
            fail = text in self.fail_first
            self.fail_first.discard(text)
        if fail:
            self.send_response(503)
            self.end_headers()
            return
        reply = {"choices": [{"message": {"content": "A minor" if "chord" in text else "music"}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    _Handler.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_openai_reasoner_against_local_server(server, speech_wav, monkeypatch, caplog):
    from autagent.config import OpenAIConfig
    from autagent.reasoners.openai_compat import OpenAIReasoner

    monkeypatch.setenv("TEST_AUDIO_KEY", "sk-secret-123")
    config = OpenAIConfig(base_url=server, model="qwen2-audio", api_key_env="TEST_AUDIO_KEY", max_concurrency=2,
                          max_retries=2, timeout_s=5.0)
    client = OpenAIReasoner(config)
    chord = _sample(speech_wav[0], "Which chord is played?", ["C major", "A minor"], "A minor", "c1")
    kind = _sample(speech_wav[0], "What kind of audio?", ["speech", "music"], "speech", "k1")
    _Handler.fail_first = {render(chord.question, chord.choices, None)}
    with caplog.at_level(logging.WARNING):
        replies = client.answer_many([(chord, None), (kind, None)])
    assert replies == ["A minor", "music"]
    assert len(_Handler.requests) == 3  # one 503 retried
    first = _Handler.requests[0]
    assert first["auth"] == "Bearer sk-secret-123"
    assert first["body"]["messages"][0]["content"][0]["type"] == "input_audio"
    assert "sk-secret-123" not in caplog.text and "sk-secret-123" not in client.fingerprint()


def test_openai_reasoner_gives_up_as_unanswered(speech_wav):
    from autagent.config import OpenAIConfig
    from autagent.reasoners.openai_compat import OpenAIReasoner

    client = OpenAIReasoner(OpenAIConfig(base_url="http://127.0.0.1:9/v1", max_retries=1, timeout_s=0.5))
    sample = _sample(speech_wav[0], "q?", ["a", "b"], "a")
    assert client.answer(sample, None) is None and client.failures == 1

"""Reasoners: the embedded simulator's hearing and reading, the answer cache (content-keyed, failures
never cached), prompt rendering in the paper's shapes, and the OpenAI-compatible client against a
local server that misbehaves in every way we could think of."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from autagent.data.sample import Sample
from autagent.reasoners import CachedReasoner
from autagent.reasoners.base import Reply
from autagent.reasoners.embedded import EmbeddedReasoner, EmbeddedReasonerConfig
from autagent.reasoners.prompts import render
from autagent.reasoners.reading import flatten


@pytest.fixture(scope="module")
def reasoner():
    return EmbeddedReasoner(EmbeddedReasonerConfig())


def _sample(path, question, choices, answer, sid="s1"):
    return Sample(id=sid, audio=str(path), question=question, choices=tuple(choices), answer=answer)


def test_flatten_reads_the_papers_shapes():
    (chord,) = flatten("chords", [{"timestamp": [0.0, 2.0], "value": "A:min"}], 10)
    assert chord.text == "chords A minor" and chord.span == (0.0, 2.0)
    (tempo,) = flatten("tempo", "117.19", 10)
    assert tempo.numbers == ((117.19, "bpm"),)
    (tempo,) = flatten("tempo", "117.2 BPM", 10)  # the notation records are shown in (tools/notation.py)
    assert tempo.numbers == ((117.2, "bpm"),) and tempo.text == flatten("tempo", "117.20", 10)[0].text
    (symbol,) = flatten("chords", [{"timestamp": [0.0, 2.0], "value": "Bbm"}], 10)
    assert symbol.text == flatten("chords", [{"timestamp": [0.0, 2.0], "value": "A#:min"}], 10)[0].text
    (f0,) = flatten("pitch", [{"timestamp": 1.5, "fundamental frequency": "520.91 Hz"}], 10)
    assert (520.91, "hz") in f0.numbers and f0.span == (1.5, 1.5)


def test_embedded_reads_the_relevant_record_and_grounds_time(reasoner, chord_wav):
    sample = _sample(
        chord_wav[0], "Which chord is played at 5.0 seconds?", ["C major", "A minor", "F major", "G major"], "F major"
    )
    chords = {
        "tool": "chords",
        "output": [
            {"start": 0.0, "end": 2.0, "chord": "C:maj"},
            {"start": 2.0, "end": 4.0, "chord": "A:min"},
            {"start": 4.0, "end": 6.0, "chord": "F:maj"},
            {"start": 6.0, "end": 8.0, "chord": "G:maj"},
        ],
    }
    assert reasoner.answer_many([(sample, [chords])])[0].text == "F major"
    moved = Sample(**{**sample.__dict__, "question": "Which chord is played at 1.0 seconds?"})
    assert reasoner.answer_many([(moved, [chords])])[0].text == "C major"  # temporal grounding, same record
    symbols = Sample(**{**sample.__dict__, "choices": ("C", "Am", "F", "G"), "answer": "F"})
    assert reasoner.answer_many([(symbols, [chords])])[0].text == "F"  # chord symbols read as names


def test_the_distractible_reader_takes_any_resemblance_as_evidence(reasoner):
    """Irrelevant records mislead the default (distractible) reader because it has no evidence floor: a
    sound tagger's "Speech" resembles one of three spoken sentences a little more than the others, and
    that counts as support for it; with a floor of 0.2 the same record supports none of them."""
    sentences = ["The train leaves at noon.", "Please close the window.", "I lost my keys."]
    record = {
        "labels": [{"value": "Speech", "score": 0.99}],
        "timeline": [{"timestamp": [0.0, 2.0], "value": "Speech"}],
    }
    facts = flatten("sound_events", record, 10)
    vectors, options = reasoner.text.encode([f.text for f in facts]), reasoner.text.encode(sentences)
    loose = reasoner.matches(sentences, options, facts, vectors)
    assert reasoner.config.semantic_floor == 0.0 and loose.max() > 0.05
    assert loose.max(axis=1).argmax() == 1 and loose.max(axis=1)[1] > loose.max(axis=1)[[0, 2]].max() + 0.02
    floored = EmbeddedReasoner(EmbeddedReasonerConfig(semantic_floor=0.2))
    assert not floored.matches(sentences, options, facts, vectors).any()


def test_hearing_dilution_turns_down_the_ears_by_the_amount_of_tool_text(reasoner, music_wav):
    """The default (distractible) reader has ``hearing_dilution`` 2: what it heard counts 1 / (1 + n / 2)
    when it reads n record facts; without records, or with no dilution, it counts in full."""
    import numpy as np

    sample = _sample(music_wav, "What kind of audio is this?", ["speech", "music", "a sound"], "music")
    record = {"tool": "chords", "output": [{"start": 0.0, "end": 2.0, "chord": "C:maj"}]}
    n = len(reasoner.facts(record)[0])
    undiluted = EmbeddedReasoner(EmbeddedReasonerConfig(hearing_dilution=None))
    heard = undiluted.scores(sample, None)
    assert reasoner.config.hearing_dilution == 2.0 and np.allclose(reasoner.scores(sample, None), heard)
    drop = undiluted.scores(sample, [record]) - reasoner.scores(sample, [record])
    assert heard.max() > 0.1 and np.allclose(drop, heard * (1 - 1 / (1 + n / 2.0)))


def test_embedded_hears_the_gist_but_not_the_detail(reasoner, speech_wav, music_wav):
    kinds = ["speech", "music", "a sound"]
    assert (
        reasoner.answer_many([(_sample(speech_wav[0], "What kind of audio is this?", kinds, "speech"), None)])[0].text
        == "speech"
    )
    assert (
        reasoner.answer_many([(_sample(music_wav, "What kind of audio is this?", kinds, "music"), None)])[0].text
        == "music"
    )
    heard = " ".join(f.text for f in reasoner.listener.listen(str(speech_wav[0])))
    assert "fox" not in heard.lower()  # the words themselves need ASR


def test_hearing_recognises_a_real_recording_when_clean_and_confuses_it_in_noise(reasoner, tmp_path):
    """The benchmark's animal clips are real recordings: the listener names a clean cow, and hears
    something else when the same call is buried 5 dB under white noise."""
    import numpy as np

    from autagent.data import synth as S
    from autagent.data.generator.vocab import RECORDINGS

    call = S.recording(f"{RECORDINGS}/animals/mammals/bovines/cow_white.ogg")
    clip = S.place(np.zeros(4 * S.SR, dtype=np.float32), call, 0.3)
    noise = S.noise(4.0, np.random.default_rng(0), "white")
    heard = {}
    for snr in (30, -5):
        S.write_wav(tmp_path / f"cow{snr}.wav", S.normalise(S.mix(clip, noise, snr)))
        heard[snr] = " ".join(f.text for f in reasoner.listener.listen(str(tmp_path / f"cow{snr}.wav")))
    assert "Cattle" in heard[30] or "Moo" in heard[30], heard
    assert "Cattle" not in heard[-5] and "Moo" not in heard[-5], heard


def test_a_clip_that_cannot_be_heard_is_an_error_not_a_crash(reasoner, tmp_path):
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    (reply,) = reasoner.answer_many([(_sample(empty, "q?", ["a", "b"], "a"), None)])
    assert reply.text is None and str(empty) in reply.error


class _Flaky:
    name = "flaky"

    def __init__(self):
        self.calls = 0

    def fingerprint(self):
        return "flaky-1"

    def answer_many(self, requests):
        self.calls += len(requests)
        return [Reply(None, "HTTP 503") if s.question == "fails" else Reply(s.choices[0]) for s, _ in requests]


def test_answer_cache_keys_by_content_and_never_caches_failures(tmp_path, speech_wav, music_wav):
    clip = tmp_path / "clip.wav"
    shutil.copy(speech_wav[0], clip)
    inner = _Flaky()
    cached = CachedReasoner(inner, tmp_path / "answers")
    ok, bad = _sample(clip, "works", ["x", "y"], "x"), _sample(clip, "fails", ["x", "y"], "x")
    assert [r.text for r in cached.ask([(ok, None), (bad, None)])] == ["x", None]
    assert cached.failures == 1 and inner.calls == 2
    cached.close()
    again = CachedReasoner(inner, tmp_path / "answers")
    again.ask([(ok, None), (bad, None)])
    assert inner.calls == 3 and again.hits == 1  # the failure was retried, the answer served from disk
    shutil.copy(music_wav, clip)  # same path, other audio (data regenerated): a new question
    again.ask([(ok, None)])
    assert inner.calls == 4
    again.close()
    cache_file = next((tmp_path / "answers").glob("*.jsonl"))
    with open(cache_file, "a") as handle:
        handle.write('{"key": "torn')
    third = CachedReasoner(inner, tmp_path / "answers")
    assert third.ask([(ok, None)])[0].text == "x" and third.hits == 1  # a torn last line is ignored


def test_prompts_show_records_in_the_papers_shapes_and_replies_map_to_choices():
    choices = ["C major", "A minor"]
    assert "Tool outputs" not in render("Which chord?", choices, None)
    record = {
        "tool": "chords",
        "output": [{"start": 0.0, "end": 2.0, "chord": "A:min"}],
        "backend": "x",
        "version": "y",
    }
    with_tools = render("Which chord?", choices, [record, {"tool": "tempo", "output": {"bpm": 117.19, "beats": []}}])
    assert '{"timestamp": [0.0, 2.0], "value": "Am"}' in with_tools and '"output": "117.2 BPM"' in with_tools
    assert "backend" not in with_tools
    from rewards.scoring import is_correct

    minor, major = (
        Sample(id="c", audio="", question="Which chord?", choices=tuple(choices), answer=a) for a in reversed(choices)
    )
    assert is_correct(minor, "(B)") and not is_correct(major, "(B)")  # a label names its choice
    assert is_correct(major, "It is C major.") and not is_correct(minor, "It is C major.")
    assert not is_correct(major, "no idea") and not is_correct(major, None)


# ---- an OpenAI-compatible server that misbehaves -----------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    requests: list = []
    counts: dict = {}
    lock = threading.Lock()

    def _reply(self, status, body: bytes, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][0]["content"][1]["text"].split("Question: ")[1].split("\n")[0]
        with self.lock:
            type(self).requests.append({"auth": self.headers.get("Authorization"), "question": question})
            n = self.counts[question] = self.counts.get(question, 0) + 1
        if question == "hang":
            time.sleep(2.0)
        elif question == "slow":
            time.sleep(0.2)
            self._reply(
                200,
                json.dumps({"choices": [{"message": {"content": "music"}}]}).encode(),
                [("Content-Type", "application/json")],
            )
        elif question == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.close()
        elif question == "burst" and n <= 2:
            self._reply(429, b"slow down", [("Retry-After", "0.05")])
        elif question == "malformed":
            self._reply(200, b'{"choices": [', [("Content-Type", "application/json")])
        elif question == "html":
            self._reply(200, b"<html><body>502 Bad Gateway</body></html>", [("Content-Type", "text/html")])
        elif question == "always503":
            self._reply(503, b"")
        else:
            content = "<b>junk</b>" if question == "junk" else "music"
            self._reply(
                200,
                json.dumps({"choices": [{"message": {"content": content}}]}).encode(),
                [("Content-Type", "application/json")],
            )

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    _Handler.requests, _Handler.counts = [], {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_openai_reasoner_retries_with_backoff_counts_errors_and_caches_only_answers(
    server, speech_wav, monkeypatch, caplog, tmp_path
):
    from autagent.reasoners import OpenAIConfig
    from autagent.reasoners.openai_compat import OpenAIReasoner

    monkeypatch.setenv("TEST_AUDIO_KEY", "sk-secret-123")
    config = OpenAIConfig(
        base_url=server,
        model="qwen2-audio",
        api_key_env="TEST_AUDIO_KEY",
        max_concurrency=4,
        max_retries=2,
        timeout_s=0.5,
        pacing="fixed",  # every try within 0.5 s (adaptive pacing lengthens a timed-out one's: tests/test_pacing.py)
    )
    inner = OpenAIReasoner(config)
    cached = CachedReasoner(inner, tmp_path)
    questions = ["fine", "hang", "reset", "burst", "malformed", "html", "always503", "junk"]
    samples = [_sample(speech_wav[0], q, ["speech", "music"], "speech", q) for q in questions]
    with caplog.at_level(logging.WARNING):
        replies = dict(zip(questions, cached.ask([(s, None) for s in samples])))
    assert (
        replies["fine"] == Reply("music")
        and replies["burst"] == Reply("music")
        and replies["junk"] == Reply("<b>junk</b>")
    )
    for q in ("hang", "reset", "malformed", "html", "always503"):
        assert replies[q].text is None and replies[q].error, q
        assert _Handler.counts[q] == 3, q  # bounded: one try and two retries
    assert "Timeout" in replies["hang"].error and "malformed" in replies["html"].error
    assert cached.failures == 5 and inner.failures == 5
    cached.close()
    stored = [json.loads(line) for line in next(tmp_path.glob("*.jsonl")).read_text().splitlines()]
    assert len(stored) == 3  # fine, burst and junk: a failure is never an answer
    assert _Handler.requests[0]["auth"] == "Bearer sk-secret-123"
    written = caplog.text + inner.fingerprint() + next(tmp_path.glob("*.jsonl")).read_text()
    assert "sk-secret-123" not in written


def test_openai_payloads_are_built_only_when_their_request_is_sent(server, speech_wav, monkeypatch, tmp_path):
    """Each clip's base64 payload is made once its request holds the concurrency semaphore, so at most
    ``max_concurrency`` exist at once, not one per request of the batch."""
    from autagent.reasoners import OpenAIConfig, openai_compat
    from autagent.reasoners.openai_compat import OpenAIReasoner

    built, outstanding, peak = [], [0], [0]
    encode = openai_compat.wav_base64

    def counting(path, *args):
        built.append(path)
        outstanding[0] += 1
        peak[0] = max(peak[0], outstanding[0])
        return encode(path, *args)

    monkeypatch.setattr(openai_compat, "wav_base64", counting)
    reasoner = OpenAIReasoner(OpenAIConfig(base_url=server, model="m", api_key_env="NO_SUCH_KEY", max_concurrency=2))
    original = reasoner._one

    async def one(api, semaphore, sample, records):
        try:
            return await original(api, semaphore, sample, records)
        finally:
            outstanding[0] -= 1

    reasoner._one = one
    samples = [_sample(speech_wav[0], "slow", ["speech", "music"], "speech", f"s{i}") for i in range(6)]
    replies = reasoner.answer_many([(s, None) for s in samples])
    assert [r.text for r in replies] == ["music"] * 6 and len(built) == 6
    assert peak[0] == 2  # never more payloads than requests in flight

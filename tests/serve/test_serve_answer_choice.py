"""Issue 63.1, second half: a real model behind the service answers free-form ("It sounds like a piano
to me."); the service says which of the request's choices that answer is (``autagent.answer``), or that
it names none or several (null), leaving the answer as the model wrote it, so the OpenAI SDK reads the
reply unchanged.  Through HTTP, a stand-in upstream answering free-form."""

from __future__ import annotations

import httpx
import pytest
from helpers.serve import TOOLS, InThread, ScriptUpstream, chat_message, router_plugin, start_service

CHOICES = ["guitar", "piano", "drums"]
ANSWERS = {
    "What is playing?": "It sounds like a piano to me.",
    "Which instrument?": "The answer is (C).",
    "Name it.": "B",
    "Which one, really?": "Maybe piano or guitar, hard to say.",
    "And now?": "I cannot tell from this recording.",
    "Which, in short?": "Answer: A",
}
"""Each question's free-form answer from the stand-in model."""


def free_form(body, turn):
    content = body["messages"][-1]["content"]
    text = content if isinstance(content, str) else content[-1]["text"]
    question = next(q for q in ANSWERS if q in text)
    return {"content": ANSWERS[question]}


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    """A plugin that selects no tool: the answer's reading is what is tested, not the tools."""
    return router_plugin(tmp_path_factory.mktemp("answer") / "quiet", [-5.0] * len(TOOLS))


def post(url: str, path, question: str, listed: bool) -> dict:
    """``question`` with the choices as a ``choices`` list (``listed``) or as (A)-lines of its text."""
    messages = chat_message(path, question, CHOICES if not listed else [])
    body = {"model": "m", "messages": messages} | ({"choices": CHOICES} if listed else {})
    reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_free_form_answer_is_read_back_as_the_choice_it_names(quiet, tmp_path, melody_wav):
    from openai import OpenAI

    upstream = ScriptUpstream(free_form)
    service = start_service(quiet, tmp_path / "service", upstream=upstream.url)
    try:
        expected = {
            "What is playing?": {"index": 1, "label": "B", "text": "piano"},
            "Which instrument?": {"index": 2, "label": "C", "text": "drums"},
            "Name it.": {"index": 1, "label": "B", "text": "piano"},
            "Which one, really?": None,  # names two
            "And now?": None,  # names none
            "Which, in short?": {"index": 0, "label": "A", "text": "guitar"},
        }
        for listed in (True, False):
            for question, choice in expected.items():
                reply = post(service.url, melody_wav[0], question, listed)
                assert reply["choices"][0]["message"]["content"] == ANSWERS[question]  # as the model wrote it
                assert reply["autagent"]["answer"] == choice, (question, listed)
                assert reply["autagent"]["tools"] == []  # the service's own fields beside it
        sent = upstream.seen[0]["messages"][-1]["content"][-1]["text"]
        assert "(A) guitar\n(B) piano\n(C) drums" in sent  # the choices list reached the model as lines
        client = OpenAI(base_url=service.url + "/v1", api_key="none", max_retries=0)
        completion = client.chat.completions.create(
            model="m",
            messages=chat_message(melody_wav[0], "What is playing?", []),
            extra_body={"choices": CHOICES},
        )
        assert completion.choices[0].message.content == ANSWERS["What is playing?"]
        assert completion.model_extra["autagent"]["answer"]["text"] == "piano"
    finally:
        service.stop()
        upstream.httpd.shutdown()


def test_a_service_without_a_plugin_reads_the_answer_back_too_and_a_question_without_choices_gets_none(
    tmp_path, melody_wav
):
    from autagent.config import load_config
    from autagent.serve import build, create_app

    upstream = ScriptUpstream(free_form)
    config = load_config(None, {"answer_cache_dir": str(tmp_path / "answers")})
    service = InThread(create_app(build(config, upstream=upstream.url, audio_dir=str(tmp_path / "audio"))))
    try:
        reply = post(service.url, melody_wav[0], "What is playing?", listed=False)
        assert reply["autagent"] == {"answer": {"index": 1, "label": "B", "text": "piano"}}
        messages = [{"role": "user", "content": "What is playing?"}]  # no choices: nothing to read back
        reply = httpx.post(service.url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=60)
        assert reply.status_code == 200 and "autagent" not in reply.json(), reply.text
    finally:
        service.stop()
        upstream.httpd.shutdown()


def test_reading_the_answer_as_evaluation_reads_a_reply():
    from autagent.serve.chat_call import answer_choice

    def read(text, choices=("guitar", "piano", "drums")):
        found = answer_choice({"choices": [{"message": {"role": "assistant", "content": text}}]}, list(choices))
        return found and found["label"]

    assert [read(t) for t in ("(B)", "B.", "(B) piano", "Piano", "a guitar", "answer is B.")] == list("BBBBAB")
    assert read("(A) or (B)") is None and read("I hear drums, not a guitar") is None and read("The answer is Z") is None
    assert read("C major", ["C major", "G major"]) == "A" and read("major", ["C major", "G major"]) is None
    assert read("D", ["A", "D"]) == "B"  # a choice that looks like a label is that choice
    assert read("three", ["three", "three", "two"]) is None  # a repeated text: two choices, none named
    assert answer_choice({"choices": [{"message": {"content": None, "tool_calls": []}}]}, ["a", "b"]) is None

"""The request models of :mod:`autagent.serve.protocol`: the one place a body is checked.  A valid
request passes, a wrong type, an unknown field or a bad audio format is a one-line 400 naming the
field's path (also OpenAI's ``param``), vLLM's extras pass and go upstream in ``extra_body``, and the
schema in ``/openapi.json`` is the models' own."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from helpers.serve import TOOLS, Upstream, chat_message, router_plugin, service_options

from autagent.serve import create_app
from autagent.serve.protocol import ChatRequest, Invalid, SelectRequest

AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
TEXT = {"type": "text", "text": "Which is it?\n(A) one\n(B) two"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": [TEXT, AUDIO]}]}


def _with(**fields) -> dict:
    return {**CHAT, **fields}


def _part(**audio) -> dict:
    """CHAT with its audio part's ``input_audio`` replaced by ``audio``."""
    return _with(messages=[{"role": "user", "content": [TEXT, {"type": "input_audio", "input_audio": audio}]}])


def test_valid_requests_pass_with_vllm_extras_other_parts_and_a_tool_calling_history():
    body = _with(top_k=20, min_p=0.1, guided_json={"type": "object"}, temperature=1, stop=["\n"], choices=["a", "b"])
    body["messages"] = [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c", "content": "{}"},
        {"role": "user", "content": [TEXT, {"type": "image_url", "image_url": {"url": "x"}}, {**AUDIO}]},
    ]
    request = ChatRequest.checked(body)
    assert request.top_k == 20 and request.model_extra["guided_json"] == {"type": "object"}
    upper = _part(data="UklGRg==", format="WAV")  # the clip reader takes a format in any case
    assert ChatRequest.checked(upper).messages[0].content[1].input_audio.format == "wav"
    select = SelectRequest.checked({"audio": "UklGRg==", "question": "Which?", "choices": ["a"], "explain": True})
    assert select.format == "wav" and select.explain is True


@pytest.mark.parametrize(
    "body, message, param",
    [
        (_with(temperature="hot"), "temperature must be a number, got string", "temperature"),
        (_with(max_tokens=1.5), "max_tokens must be an integer, got number", "max_tokens"),
        (_with(stream=1), "stream must be a boolean, got integer", "stream"),
        (_with(stop=5), "stop must be a string or a list, got integer", "stop"),
        (_with(choices=["a", 2]), "choices[1] must be a string, got integer", "choices[1]"),
        (_with(frobnicate=1), "unknown request field 'frobnicate'", None),
        (_with(messages=[]), "messages must not be empty", "messages"),
        (_with(messages=[{"role": "user", "content": 5}]), "messages[0].content must be text or a list", None),
        (_with(messages=[{"role": "robot", "content": "x"}]), "messages[0].role must be one of", "messages[0].role"),
        (
            _part(data="UklGRg==", format="exe"),
            "messages[0].content[1].input_audio.format must be one of 'flac', 'm4a', 'mp3', 'ogg', 'wav' or 'webm', "
            "got 'exe'",
            "messages[0].content[1].input_audio.format",
        ),
        (_part(format="wav"), "messages[0].content[1].input_audio.data is required", None),
        (_part(data=7, format="wav"), "messages[0].content[1].input_audio.data must be a string, got integer", None),
    ],
)
def test_a_bad_chat_request_is_one_line_naming_the_field(body, message, param):
    with pytest.raises(Invalid) as refused:
        ChatRequest.checked(body)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
    if param is not None:
        assert refused.value.param == param


def test_the_model_is_required_only_when_the_service_has_none_to_send():
    without = {k: v for k, v in CHAT.items() if k != "model"}
    assert ChatRequest.checked(without).model is None
    with pytest.raises(Invalid, match=r"^model is required \(or start the service with --model\)$"):
        ChatRequest.checked(without, model_required=True)


@pytest.mark.parametrize(
    "body, message",
    [
        ({"audio": "x", "question": [[1]]}, "question must be a string, got list"),
        ({"audio": "x"}, "question is required"),
        ({"audio": "x", "question": "q", "format": "exe"}, "format must be one of"),
        ({"audio": "x", "question": "q", "explain": "yes"}, "explain must be a boolean, got string"),
    ],
)
def test_a_bad_select_request_is_one_line_naming_the_field(body, message):
    with pytest.raises(Invalid, match="^" + message.replace("(", r"\(")):
        SelectRequest.checked(body)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("protocol") / "quiet", [-5.0] * len(TOOLS))


@pytest.fixture
def served(plugin, tmp_path):
    """A plugin service in front of an echo upstream, through FastAPI's test client."""
    echo = Upstream("echo")
    try:
        app = create_app(service_options(plugin, tmp_path, upstream=echo.url))
        with TestClient(app, base_url="http://127.0.0.1") as client:  # a Host the service answers
            yield client, echo
    finally:
        echo.httpd.shutdown()


def test_the_service_answers_a_refused_body_with_an_openai_shaped_400_and_forwards_vllm_extras(served):
    client, echo = served
    for path, body, param in (
        ("/v1/chat/completions", _part(data="UklGRg==", format="exe"), "messages[0].content[1].input_audio.format"),
        ("/v1/chat/completions", _with(temperature="hot"), "temperature"),
        ("/v1/select", {"audio": "x", "question": "q", "explain": "yes"}, "explain"),
    ):
        reply = client.post(path, json=body)
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param, reply.text
        assert error["message"].startswith(param) and "\n" not in error["message"] and "pydantic" not in reply.text
    assert echo.seen == []


def test_vllm_extras_pass_the_model_and_go_upstream_as_sent(served, melody_wav):
    client, echo = served
    chat = {"model": "m", "messages": chat_message(melody_wav[0], "Which?", ["one", "two"]), "top_k": 20}
    reply = client.post("/v1/chat/completions", json={**chat, "repetition_penalty": 1.1, "guided_choice": ["a"]})
    assert reply.status_code == 200, reply.text
    sent = echo.seen[-1]
    assert sent["top_k"] == 20 and sent["repetition_penalty"] == 1.1 and sent["guided_choice"] == ["a"]
    assert "choices" not in sent


def test_the_openapi_document_publishes_the_models_schemas(served):
    client, _ = served
    paths = client.get("/openapi.json").json()["paths"]

    def schema(path):
        return paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]

    chat, select = schema("/v1/chat/completions"), schema("/v1/select")
    assert chat["title"] == "ChatRequest" and select["title"] == "SelectRequest"
    assert "top_k" in chat["properties"] and chat["properties"]["messages"]["minItems"] == 1
    parts = chat["properties"]["messages"]["items"]["properties"]["content"]["anyOf"][1]["items"]["oneOf"]
    audio = next(p for p in parts if p["title"] == "InputAudioPart")
    assert audio["properties"]["input_audio"]["properties"]["format"]["enum"] == [
        "flac",
        "m4a",
        "mp3",
        "ogg",
        "wav",
        "webm",
    ]
    assert select["required"] == ["question"] and "$ref" not in str(chat) + str(select)

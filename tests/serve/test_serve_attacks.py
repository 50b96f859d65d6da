"""The service's third pass (issue 49): one request must not freeze it, a clip must not read the
server's files, deep or mistyped JSON is a 4xx, messages name no paths.  Every test here fails on
2e698d3 (the code before the issue)."""

from __future__ import annotations

import base64
import time

import httpx
import pytest
from helpers.serve import TOOLS, router_plugin, start_service


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """One service for the module (a plugin that selects no tool, the embedded reasoner)."""
    folder = tmp_path_factory.mktemp("attacks")
    running = start_service(router_plugin(folder / "quiet", [-5.0] * len(TOOLS)), folder)
    yield running
    running.stop()


def test_choice_parsing_takes_linear_time_on_a_long_run_of_spaces():
    from autagent.reasoners.messages import question_and_choices

    line = "A) x" + " " * 40_000 + "y"  # the old lazy pattern: about 8 s here, the GIL held all along
    started = time.process_time()
    question, choices = question_and_choices("Which?\n" + line + "\nB) z")
    assert time.process_time() - started < 0.5
    assert question == "Which?" and choices == ("x" + " " * 40_000 + "y", "z")
    # the forms the pattern read are read the same way
    assert question_and_choices("Q\n(A) one \n B. two\nC: three")[1] == ("one", "two", "three")
    assert question_and_choices("Q\nA)\nab) c\nA)x")[1] == ("x",)


def test_a_text_field_over_its_cap_is_a_400_naming_it(service, click_wav):
    audio = base64.b64encode(click_wav[0].read_bytes()).decode()
    long_text = "Which?\n(A) x" + " " * 100_000 + "y\n(B) z"
    message = [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
                {"type": "text", "text": long_text},
            ],
        }
    ]
    for _ in range(2):  # the second once the first has loaded what a request loads
        started = time.time()
        body = {"model": "m", "messages": message}
        reply = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400 and time.time() - started < 2, reply.text
    assert "text is 100019 characters, over the 65536-character limit" in reply.json()["error"]["message"]
    body = {"audio": audio, "question": long_text}
    reply = httpx.post(service.url + "/v1/select", json=body, timeout=60)
    assert reply.status_code == 400 and reply.json()["error"]["message"].startswith("question is 100019")
    reply = httpx.post(service.url + "/v1/select", json={"audio": audio, "question": [[1]]}, timeout=60)
    assert reply.status_code == 400 and "question must be a string" in reply.text


def test_a_long_realtime_input_text_is_read_at_once_and_one_over_the_cap_is_an_error_event(service):
    from helpers.realtime import Client

    client = Client(service.url)
    for spaces in (50_000, 70_000):  # the old pattern held the event loop 16 s for the first
        text = "Which?\nA) x" + " " * spaces + "y"
        started = time.time()
        client.send("conversation.item.create", item={"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": text}]})  # fmt: skip
        event = client.recv(timeout=20)
        health = httpx.get(service.url + "/health", timeout=5)
        assert health.status_code == 200 and time.time() - started < 2
        if spaces < 65536:
            assert event["type"] == "conversation.item.added", event
            client.recv(timeout=5)  # conversation.item.done
        else:
            assert event["type"] == "error" and "input_text is 70012 characters" in event["error"]["message"]
    client.close()


def _audio_message(path, text: str) -> list:
    return _encoded_message(base64.b64encode(path.read_bytes()).decode(), text)


def _encoded_message(audio: str, text: str) -> list:
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
                {"type": "text", "text": text},
            ],
        }
    ]


def test_deep_or_mistyped_json_is_a_400_or_an_error_event_never_a_500(service, click_wav):
    from helpers.realtime import SESSION, Client

    from autagent.reasoners.prompts import RECORDS_HEADER

    headers = {"Content-Type": "application/json"}
    for depth in (200, 60_000):  # parsed but too deep to walk; too deep for the parser itself
        deep = "[" * depth + "]" * depth
        reply = httpx.post(service.url + "/v1/chat/completions", content=f'{{"x": {deep}}}', headers=headers)
        assert reply.status_code == 400 and "nested deeper than 64" in reply.text, reply.text
    deep = "[" * 100_000 + "]" * 100_000  # more brackets than a body may hold: refused before it is parsed
    reply = httpx.post(service.url + "/v1/chat/completions", content=f'{{"x": {deep}}}', headers=headers)
    assert reply.status_code == 413 and "more than 65536 JSON separators" in reply.text, reply.text
    records = RECORDS_HEADER + "[" * 30_000 + "]" * 30_000 + "\nWhich?\n(A) a\n(B) b"
    body = {"model": "m", "messages": _audio_message(click_wav[0], records)}
    reply = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400 and "tool records in the prompt are nested deeper" in reply.text, reply.text
    client = Client(service.url)
    client.socket.send("[" * 100_000 + "]" * 100_000)
    assert "nested deeper than 64" in client.recv(10)["error"]["message"]
    for bad in ({"output_modalities": 5}, {"audio": [1]}, {"audio": {"input": 7}}, {"output_modalities": "text"}):
        client.send("session.update", session={**SESSION, **bad})
        event = client.recv(10)
        assert event["type"] == "error" and event["error"]["code"] == "invalid_session", (bad, event)
    client.send("session.update", session=SESSION)  # the socket is still open and the session goes on
    assert client.recv(10)["type"] == "session.updated"
    client.close()
    metrics = httpx.get(service.url + "/metrics").text
    assert 'kind="server_error"' not in metrics or 'kind="server_error"} 0.0' in metrics


def test_a_playlist_or_mislabelled_clip_is_a_400_with_a_reason_code_and_no_path(service, click_wav, tmp_path):
    secret = click_wav[0]  # a file of the server's: the old decoder played it and ran the tools on it
    hls = f"#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\nfile://{secret}\n#EXT-X-ENDLIST\n"
    cases = {"playlist": hls.encode(), "format_mismatch": b"fLaC" + bytes(100), "unknown_format": b"hello" * 50}
    for code, raw in cases.items():
        audio = base64.b64encode(raw).decode()
        body = {"model": "m", "messages": _encoded_message(audio, "Which?\n(A) a\n(B) b")}
        reply = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=60)
        assert reply.status_code == 400 and f"({code})" in reply.text, reply.text
        assert str(secret) not in reply.text and "/tmp" not in reply.text
    audio = base64.b64encode(b"RIFF\x00\x00\x00\x00WAVEjunk" * 100).decode()  # both decoders fail on it
    body = {"model": "m", "messages": _encoded_message(audio, "Which?")}
    reply = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=60)
    message = reply.json()["error"]["message"]
    assert reply.status_code == 400 and "(undecodable)" in message and "/" not in message, message


def test_a_name_resolving_to_public_and_private_addresses_and_special_ranges_are_refused():
    import asyncio

    from autagent.reasoners.messages import BadRequest
    from autagent.serve.remote import checked_target, is_public

    mixed = lambda host: ["93.184.216.34", "10.0.0.7"]  # noqa: E731 - one public, one private
    with pytest.raises(BadRequest, match="private"):
        asyncio.run(checked_target("http://clips.example/a.wav", False, mixed))
    target = asyncio.run(checked_target("http://clips.example/a.wav", False, lambda host: ["93.184.216.34"]))
    assert target[0].startswith("http://93.184.216.34/")
    for special in ("192.0.0.8", "192.88.99.1", "5f00::1", "3fff::1", "fec0::1", "::ffff:192.0.0.8", "2002:c000:8::"):
        assert not is_public(special), special
    assert is_public("93.184.216.34") and is_public("2606:4700::1111")


def test_the_key_from_a_file_or_the_environment_and_a_warning_for_one_on_the_command_line(tmp_path):
    import subprocess
    import sys

    from autagent.config import ConfigError
    from autagent.serve.options import ServeOptions

    key = tmp_path / "key"
    key.write_text("sk-from-file\n")
    assert ServeOptions(api_key_file=str(key)).api_key == "sk-from-file"
    (tmp_path / "empty").write_text("")
    with pytest.raises(ConfigError, match="empty"):
        ServeOptions(api_key_file=str(tmp_path / "empty"))
    command = [
        sys.executable,
        "-m",
        "autagent.cli",
        "serve",
        "--api-key",
        "sk-x",
        "--port",
        "1",
        "--plugin",
        "/nonexistent",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert "readable by every local user" in done.stderr and "sk-x" not in done.stderr


def test_choices_written_on_one_line_are_read_and_a_question_naming_labels_is_left_alone():
    from autagent.reasoners.messages import question_and_choices

    assert question_and_choices("What is it? Choices: (A) hello there (B) goodbye") == (
        "What is it?",
        ("hello there", "goodbye"),
    )
    assert question_and_choices("What is it?\nChoices: (A) one (B) two (C) three")[1] == ("one", "two", "three")
    named = "Is (A) better than (B)?"
    assert question_and_choices(named + "\n(A) yes\n(B) no") == (named, ("yes", "no"))
    started = time.process_time()
    question_and_choices("Which? (A) a" + " (B)" * 16_000)  # labels out of order and empty: not choices
    assert time.process_time() - started < 0.5


def test_a_failed_tools_message_names_the_clip_and_no_folder_of_the_service():
    from tools.audio import without_paths

    clip = "/srv/autagent/.cache/serve-audio/ab12.wav"
    error = f"{clip}: RuntimeError: model missing at /root/.cache/models/tempo.bin (see /var/log/x)"
    shown = without_paths(error, clip)
    assert shown == "the clip: RuntimeError: model missing at <path> (see <path>)"
    assert without_paths("tempo 1.5/2.0 BPM, ratio 3/4") == "tempo 1.5/2.0 BPM, ratio 3/4"

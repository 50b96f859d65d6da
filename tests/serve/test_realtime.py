"""``/v1/realtime``: the ``openai`` SDK's realtime client and a plain ``websockets`` client stream a clip
into ``autagent serve`` and get the answer and tools ``/v1/chat/completions`` gives the clip posted
whole; every fault (bad events, audio before the session is set, a full buffer, a second response,
a client that hangs up, a reasoner that fails) is an ``error`` event and the service answers the next
stream; the Python API's streaming session gives the records and prompt the whole-clip path gives."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import numpy as np
import pytest
from helpers.realtime import RATE, SESSION, TEXT, Client, pcm_chunks
from helpers.serve import Upstream, chat_message, router_plugin, start_service


@pytest.fixture(scope="module")
def calls_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("realtime") / "asr-tempo", [3.0, -3.0, -3.0, 3.0, -3.0, -3.0])


def _pcm(path, tmp_path, name: str):
    """The clip as 24 kHz 16-bit samples, and the WAV a client posting the same samples whole sends."""
    from tools.arriving import wav_bytes
    from tools.audio import load_audio

    pcm = np.round(np.clip(load_audio(path, RATE).samples, -1, 1) * 32767).astype(np.int16)
    out = tmp_path / f"{name}-24k.wav"
    out.write_bytes(wav_bytes(pcm, RATE))
    return pcm, out


def _good_stream(url: str, pcm: np.ndarray) -> dict:
    client = Client(url)
    client.send("session.update", session=SESSION)
    client.until("session.updated")
    client.ask()
    client.stream(pcm)
    done = client.answer()
    client.close()
    assert done["response"]["status"] == "completed", done
    assert httpx.get(url + "/health").json()["status"] == "ok"
    return done


@pytest.mark.slow  # an embedded reasoner, ASR and tempo behind two clients
def test_the_openai_sdks_realtime_client_gets_the_answer_and_tools_of_the_whole_clip(
    calls_plugin, tmp_path, tiny_bench
):
    from openai import AsyncOpenAI

    service = start_service(calls_plugin, tmp_path, max_audio_seconds=30.0)
    ws_url = service.url.replace("http://", "ws://") + "/v1"
    try:
        for sample in tiny_bench["test"][:3]:
            pcm, whole_wav = _pcm(sample.audio, tmp_path, sample.id)
            text = sample.question + "\n" + "\n".join(f"({chr(65 + i)}) {c}" for i, c in enumerate(sample.choices))

            async def realtime(pcm, text):
                client = AsyncOpenAI(api_key="unused", base_url=service.url + "/v1", websocket_base_url=ws_url)
                async with client.realtime.connect(model="embedded") as connection:
                    await connection.session.update(session=SESSION)
                    await connection.conversation.item.create(
                        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
                    )
                    for chunk in pcm_chunks(pcm):
                        await connection.input_audio_buffer.append(audio=chunk)
                    await connection.input_audio_buffer.commit()
                    await connection.response.create()
                    seen = []
                    async for event in connection:
                        seen.append(event)
                        if event.type == "response.done":
                            return seen

            events = asyncio.run(realtime(pcm, text))
            kinds = [e.type for e in events]
            assert "error" not in kinds, [e for e in events if e.type == "error"]
            assert kinds[-8:] == [
                "response.created",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.done",
            ]
            done = events[-1].response
            info = done.model_extra["autagent"]
            whole = httpx.post(
                service.url + "/v1/chat/completions",
                json={"model": "embedded", "messages": chat_message(whole_wav, sample.question, sample.choices)},
                timeout=120,
            ).json()
            assert (
                done.status == "completed"
                and done.output[0].content[0].text == whole["choices"][0]["message"]["content"]
            )
            assert info["tools"] == whole["autagent"]["tools"] == ["asr", "tempo"] and not info["tools_failed"]
            before, after = info["seconds"]["tools_before_commit"], info["seconds"]["tools_after_commit"]
            # the tools may have heard the whole clip before the commit: nothing left after it is 0.0, never less
            assert info["plugin"] == whole["autagent"]["plugin"] and before > 0 and after >= 0
            assert info["tools_before_commit_share"] == pytest.approx(before / (before + after), abs=2e-3)
            assert {"select_after_commit", "tools_after_commit", "upstream"} <= set(info["seconds"])
    finally:
        service.stop()


def test_a_plain_websockets_client_the_question_after_the_audio_and_none_at_all(calls_plugin, tmp_path, click_wav):
    """The question may come after the audio; with none, the transcript is the question (the upstream
    sees it); each event has the Realtime API's shape."""
    echo = Upstream("echo")
    service = start_service(calls_plugin, tmp_path, upstream=echo.url)
    pcm, _ = _pcm(click_wav[0], tmp_path, "clicks")
    try:
        client = Client(service.url)
        assert client.created["type"] == "session.created" and client.created["session"]["type"] == "realtime"
        client.send("session.update", session=SESSION)
        updated = client.until("session.updated")[-1]["session"]
        assert updated["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
        client.stream(pcm[: 4 * RATE])
        client.send("input_audio_buffer.commit")
        committed = client.until("input_audio_buffer.committed")[-1]
        assert committed["item_id"].startswith("item_")
        client.ask()  # after the commit, before response.create
        client.send("response.create")
        events = client.until("response.done")
        assert all(e["event_id"].startswith("event_") for e in events)
        assert [e for e in events if e["type"] == "response.output_text.done"][0]["text"] == "ok"
        info = events[-1]["response"]["autagent"]
        assert info["tools"] == ["asr", "tempo"] and echo.seen[-1]["messages"][0]["content"][1]["text"].endswith(TEXT)
        assert '"tool": "tempo"' in echo.seen[-1]["messages"][0]["content"][1]["text"]

        client.stream(pcm[: 2 * RATE])  # a second turn with no question at all
        client.send("input_audio_buffer.commit")
        client.send("response.create")
        assert client.until("response.done")[-1]["response"]["status"] == "completed"
        shown = echo.seen[-1]["messages"][0]["content"][1]["text"]
        assert shown.startswith("The following outputs of acoustic analysis tools") and "asr" in shown
        client.close()
    finally:
        service.stop()
        echo.httpd.shutdown()


def _stream_threads() -> int:
    return sum(t.name.startswith("autagent-stream") and t.is_alive() for t in threading.enumerate())


def test_every_fault_is_an_error_event_and_the_service_answers_the_next_stream(calls_plugin, tmp_path, click_wav):
    pcm, _ = _pcm(click_wav[0], tmp_path, "clicks")
    pcm = pcm[: 3 * RATE]
    service = start_service(calls_plugin, tmp_path, max_audio_seconds=4.0, max_realtime_sessions=2)
    health = lambda: httpx.get(service.url + "/health").json()  # noqa: E731

    def error_of(client: Client) -> dict:
        event = client.until("error")[-1]["error"]
        assert set(event) == {"type", "code", "message", "param", "event_id"}
        return event

    try:
        client = Client(service.url)
        client.send("input_audio_buffer.append", audio=pcm_chunks(pcm)[0], event_id="ev_1")
        first = error_of(client)
        assert first["code"] == "session_not_configured" and first["event_id"] == "ev_1"
        client.send("session.frobnicate")
        assert error_of(client)["code"] == "unknown_event"
        client.socket.send("{not json")
        assert error_of(client)["code"] == "invalid_json"
        client.send("session.update", session=SESSION)
        client.until("session.updated")
        client.send("input_audio_buffer.append", audio="not base64!!")
        assert "not valid base64" in error_of(client)["message"]
        client.send("input_audio_buffer.commit")
        assert error_of(client)["code"] == "input_audio_buffer_commit_empty"
        client.send("response.create")
        assert error_of(client)["code"] == "no_committed_audio"
        client.stream(pcm)
        client.send("input_audio_buffer.append", audio=pcm_chunks(pcm[: int(1.5 * RATE)], 1.5)[0])  # past the 4 s cap
        full = error_of(client)
        assert full["code"] == "input_audio_buffer_full" and "cap of 4 s" in full["message"]
        client.ask()
        client.send("input_audio_buffer.commit")
        client.send("response.create")
        client.send("response.create")  # while the first runs
        assert error_of(client)["code"] == "conversation_already_has_active_response"
        assert client.until("response.done")[-1]["response"]["status"] == "completed"  # the buffer kept its 3 s
        client.close()
        _good_stream(service.url, pcm)

        hangs_up = Client(service.url)  # a client that disconnects mid-stream
        hangs_up.send("session.update", session=SESSION)
        hangs_up.until("session.updated")
        hangs_up.ask()
        hangs_up.stream(pcm[: 2 * RATE])
        time.sleep(0.5)
        assert _stream_threads() >= 1 and health()["realtime_sessions"] == 1
        hangs_up.socket.close()
        deadline = time.time() + 30
        while health()["realtime_sessions"] and time.time() < deadline:
            time.sleep(0.1)
        assert health()["realtime_sessions"] == 0  # its work stopped (it counts until then), its audio freed
        _good_stream(service.url, pcm)

        held = [Client(service.url), Client(service.url)]  # the service's two sessions
        extra = Client(service.url)
        assert extra.created["type"] == "error" and extra.created["error"]["code"] == "session_limit_reached"
        for client in held:
            client.close()
        deadline = time.time() + 10
        while health()["realtime_sessions"] and time.time() < deadline:
            time.sleep(0.1)
        _good_stream(service.url, pcm)
        assert health()["status"] == "ok"
    finally:
        service.stop()


def test_a_reasoner_failing_mid_response_is_an_error_event_and_a_failed_response(calls_plugin, tmp_path, click_wav):
    flaky = Upstream("flaky")
    pcm, _ = _pcm(click_wav[0], tmp_path, "clicks")
    service = start_service(calls_plugin, tmp_path, upstream=flaky.url)
    try:
        client = Client(service.url)
        client.send("session.update", session=SESSION)
        client.ask()
        client.stream(pcm[: 2 * RATE])
        client.send("input_audio_buffer.commit")
        client.send("response.create")
        events = client.until("response.done")
        errors = [e for e in events if e["type"] == "error"]
        message = errors[0]["error"]["message"] if errors else ""
        assert "not JSON" in message and flaky.url.split("/v1")[0] not in message  # no address told
        assert events[-1]["response"]["status"] == "failed"
        client.close()
        assert _good_stream(service.url, pcm[: 2 * RATE])["response"]["output"][0]["content"][0]["text"] == "ok"
    finally:
        service.stop()
        flaky.httpd.shutdown()


def test_the_python_apis_streaming_session_gives_the_whole_clips_records_and_prompt(calls_plugin, tmp_path, click_wav):
    import json as json_

    from autagent import Plugin

    pcm, whole_wav = _pcm(click_wav[0], tmp_path, "clicks")
    sha = json_.loads((calls_plugin / "manifest.json").read_text())["content_hash"]
    streaming = Plugin.load(calls_plugin, sha, audio_dir=tmp_path / "a")
    whole = Plugin.load(calls_plugin, sha, audio_dir=tmp_path / "b")
    session = streaming.stream(RATE)
    for k, start in enumerate(range(0, len(pcm), RATE // 10)):
        session.feed(pcm[start : start + RATE // 10].tobytes())
        if k == 10:
            session.ask("What is the tempo?", ["60 BPM", "120 BPM"])  # during the audio
    deadline, before_commit = time.time() + 60, -1.0  # the worker catches up with the audio before the commit
    while time.time() < deadline:
        time.sleep(0.3)
        caught_up = session._stepped == session.clip.received and session.tools_seconds == before_commit > 0
        before_commit = session.tools_seconds
        if caught_up:
            break
    session.commit()
    result = session.result().result(timeout=120)
    messages = chat_message(whole_wav, "What is the tempo?", ["60 BPM", "120 BPM"])
    expected = whole.augment_query(messages, whole.read(messages))
    assert result.tools == expected.tools == ["asr", "tempo"] and result.first_tools == ["asr", "tempo"]
    assert result.messages(messages[0]["content"][1]["text"]) == expected.messages
    # the work done before the commit, and only it (the step after the commit counts after it)
    assert before_commit > 0 and result.seconds["tools_before_commit"] == round(before_commit, 4)
    after = result.seconds["tools_after_commit"]
    assert after > 0 and result.before_commit_share == pytest.approx(before_commit / (before_commit + after), abs=1e-3)


def test_the_websockets_pin_fits_the_openai_sdks_realtime_extra_and_funasr():
    """pyproject's ``websockets`` range lies inside what the SDK's realtime extra and funasr declare."""
    import re
    from importlib.metadata import PackageNotFoundError, requires
    from pathlib import Path

    from packaging.requirements import Requirement
    from packaging.version import Version

    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    (pin,) = [Requirement(line) for line in re.findall(r'^\s*"(websockets[^"]*)",', text, re.MULTILINE)]
    declared = [Requirement(r) for r in requires("openai") or [] if r.startswith("websockets")]
    assert declared and all("realtime" in str(r.marker) for r in declared)
    try:
        declared += [Requirement(r) for r in requires("funasr") or [] if r.startswith("websockets")]
    except PackageNotFoundError:  # the cluster extra is not installed here
        pass
    versions = [Version(f"{major}.{minor}") for major in range(10, 21) for minor in range(0, 10)]
    allowed = [v for v in versions if v in pin.specifier]
    assert allowed and all(v in r.specifier for v in allowed for r in declared), (pin, declared)


@pytest.mark.slow  # importing funasr takes a while
def test_funasr_imports_with_the_installed_websockets():
    pytest.importorskip("funasr")
    import funasr.bin.realtime_ws  # funasr imports it with the package; it uses serve and ConnectionClosed
    import websockets
    from websockets.exceptions import ConnectionClosed

    assert callable(websockets.serve) and issubclass(ConnectionClosed, Exception)
    assert funasr.bin.realtime_ws.ConnectionClosed is ConnectionClosed


def test_a_closed_sessions_work_stops_between_tools_and_counts_until_it_has(
    calls_plugin, tmp_path, click_wav, monkeypatch
):
    """No question: the transcript runs first; the client leaves during it.  The session keeps its
    place under the cap until the transcript's call returns, and no tool starts after it."""
    from tools import arriving

    started, record = [], arriving.ClipStream._record

    def slow(self, tool_id, path):
        started.append(tool_id)
        time.sleep(2.0)
        return record(self, tool_id, path)

    monkeypatch.setattr(arriving.ClipStream, "_record", slow)
    echo = Upstream("echo")
    service = start_service(calls_plugin, tmp_path, upstream=echo.url, max_realtime_sessions=1)
    health = lambda: httpx.get(service.url + "/health").json()  # noqa: E731
    pcm, _ = _pcm(click_wav[0], tmp_path, "clicks")
    try:
        client = Client(service.url)
        client.send("session.update", session=SESSION)
        client.until("session.updated")
        client.stream(pcm[: 2 * RATE])
        client.send("input_audio_buffer.commit")
        client.send("response.create")
        deadline = time.time() + 30
        while not started and time.time() < deadline:
            time.sleep(0.05)
        client.close()
        time.sleep(0.5)
        assert started == ["asr"] and health()["realtime_sessions"] == 1  # its transcript is still running
        refused = Client(service.url)  # the cap counts the work, not the socket
        assert refused.created["type"] == "error" and refused.created["error"]["code"] == "session_limit_reached"
        deadline = time.time() + 30
        while health()["realtime_sessions"] and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        assert health()["realtime_sessions"] == 0 and started == ["asr"]  # tempo never started
        assert len(echo.seen) == 0
    finally:
        service.stop()
        echo.httpd.shutdown()


def test_odd_frames_an_empty_reply_and_the_sessions_instructions(calls_plugin, tmp_path, click_wav):
    """A frame that is JSON but not an object is an error event (it once killed the session); an
    upstream with no choices ends the response in response.done (failed); the session's instructions
    reach the upstream; an event over the size limit is an error."""
    pcm, _ = _pcm(click_wav[0], tmp_path, "clicks")
    empty, echo = Upstream("empty"), Upstream("echo")
    try:
        for upstream, status in ((empty, "failed"), (echo, "completed")):
            service = start_service(calls_plugin, tmp_path, upstream=upstream.url, max_audio_seconds=4.0)
            try:
                client = Client(service.url)
                for frame in ("[1]", '"x"', "5", "null", '{"type": ["a"]}'):
                    client.socket.send(frame)
                    assert client.until("error")[-1]["error"]["code"] == "unknown_event"
                client.socket.send(json.dumps({"type": "input_audio_buffer.append", "audio": "A" * 1_500_000}))
                assert client.until("error")[-1]["error"]["code"] == "event_too_large"
                client.send("session.update", session={**SESSION, "instructions": "Answer in French."})
                client.until("session.updated")
                client.ask()
                client.stream(pcm[: 2 * RATE])
                events = []
                client.send("input_audio_buffer.commit")
                client.send("response.create")
                events = client.until("response.done")
                assert events[-1]["response"]["status"] == status, events[-3:]
                if status == "failed":
                    assert any(e["type"] == "error" for e in events)
                else:
                    assert upstream.seen[-1]["messages"][0] == {"role": "system", "content": "Answer in French."}
                client.close()
            finally:
                service.stop()
    finally:
        empty.httpd.shutdown()
        echo.httpd.shutdown()


def test_without_a_plugin_the_committed_audio_goes_to_the_upstream_as_one_wav_and_an_empty_buffer_is_refused(
    tmp_path,
):
    """A service with no plugin (``serve/realtime_turn.py``'s bare turn): the appended PCM reaches the upstream
    as one WAV clip of the same second, the answer carries no ``autagent`` block, the clip is let go, and a
    commit of nothing is an error event (so is a response with nothing committed)."""
    import base64
    import io

    import soundfile as sf
    from helpers.serve import InThread

    from autagent.config import load_config
    from autagent.serve import build, create_app

    echo = Upstream("echo")
    config = load_config(None, {"answer_cache_dir": str(tmp_path / "answers"), "tools.cache_dir": str(tmp_path / "t")})
    options = {"audio_dir": str(tmp_path / "audio"), "upstream_retries": 0, "upstream_timeout_s": 10}
    built = build(config, upstream=echo.url, **options)
    service = InThread(create_app(built))
    pcm = (np.sin(np.arange(RATE) * 2 * np.pi * 440 / RATE) * 8000).astype(np.int16)
    try:
        client = Client(service.url)
        client.send("session.update", session=SESSION)
        client.until("session.updated")
        client.ask()
        client.stream(pcm)
        done = client.answer()
        assert done["response"]["status"] == "completed" and done["response"].get("autagent") in (None, {})
        parts = echo.seen[-1]["messages"][0]["content"]
        clip = [p for p in parts if p.get("type") == "input_audio"][0]["input_audio"]
        samples, rate = sf.read(io.BytesIO(base64.b64decode(clip["data"])))
        assert len(samples) == rate  # the second appended, whole (resampled as the upstream takes clips)
        peak = np.argmax(np.abs(np.fft.rfft(samples)))  # bins of 1 Hz: the 440 Hz tone sent
        assert abs(peak - 440) <= 1
        assert built.audio_store._held == {}  # the clip held for the upstream call was let go

        client.send("input_audio_buffer.commit")
        assert "the audio buffer is empty" in client.until("error")[-1]["error"]["message"]
        client.send("response.create")
        assert "no committed audio" in client.until("error")[-1]["error"]["message"]
        client.close()
    finally:
        service.stop()
        echo.httpd.shutdown()

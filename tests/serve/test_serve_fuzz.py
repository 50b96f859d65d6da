"""The service under generated and sustained traffic (slow: ``make test-service``, which CI runs, and
``make test-all``), on loopback only:

* an API fuzzer: schemathesis generates requests from the OpenAPI document the service publishes
  (valid and invalid bodies, headers, content types), one in six chat and select bodies carrying a
  real clip so the plugin and the upstream are reached, two in six a hostile text or clip
  (:mod:`helpers.hostile`: long lines, runs of spaces, thousands of choices written in the text,
  playlists naming a local file, lying WAV headers), then deeply nested bodies and bodies of many
  small items in every list: **no response >= 500** over >= 2,000 requests, **none over
  2 s of the service's CPU**, and ``/health`` answering **within 1 s** throughout;
* a realtime fuzz: malformed, non-object, out-of-order, oversized and hostile events (hypothesis),
  each session within 2 s of CPU and ``/health`` within 1 s throughout, then a good stream is
  answered and ``/health`` says ok;
* a soak of ``autagent serve`` in a process of its own: 2,000 distinct requests, 200 refused clips and
  50 realtime sessions dropped mid-response; the clips folder and the tool-record cache stay within
  their caps, the process's memory grows by less than SOAK_RSS_MB and its threads come back to their
  count after the warm-up.

Each prints its figures (``pytest -s`` shows them; ``make test-all`` keeps them in its log)."""

from __future__ import annotations

import base64
import io
import json
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import pytest
from helpers.hostile import (
    CPU_BOUND_S,
    HEALTH_BOUND_S,
    CpuMeter,
    HealthWatch,
    strategies,
    wide_bodies,
)
from helpers.serve import InThread, Upstream, router_plugin, service_options

pytestmark = pytest.mark.slow
FUZZ_REQUESTS = 2000
SOAK_RSS_MB = 150
"""The soak's bound on the service's memory growth after its warm-up (it measured +81 MB: the
bounded memos and caches filling up to their bounds)."""
POOLS = ("work", "stream", "other")


def fuzz_settings(examples: int):
    """hypothesis's settings for every fuzzer here: derandomized (the same draws on every run, so a count
    asserted on them is not luck), no deadline and no example database (a run on CI is a fresh machine)."""
    from hypothesis import HealthCheck, Phase, settings

    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def _clip(seed: int, seconds: float = 0.3, rate: int = 16000) -> bytes:
    """A distinct short clip (a tone whose pitch and noise depend on ``seed``) as WAV bytes."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.3 * np.sin(2 * np.pi * (200 + 3 * seed % 2000) * t) + 0.01 * rng.standard_normal(len(t))
    out = io.BytesIO()
    sf.write(out, tone.astype(np.float32), rate, format="WAV")
    return out.getvalue()


@pytest.fixture(scope="module")
def tempo_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("fuzz") / "tempo", [-5.0, -5.0, -5.0, 5.0, -5.0, -5.0])


def test_the_api_fuzzer_finds_no_response_of_500_or_more(tempo_plugin, tmp_path):
    import schemathesis
    from hypothesis import given
    from hypothesis import strategies as st
    from hypothesis.errors import Unsatisfiable

    echo = Upstream("echo")
    options = service_options(tempo_plugin, tmp_path, upstream=echo.url, max_audio_bytes=200_000, max_concurrency=4)
    app = InThread(__import__("autagent.serve", fromlist=["create_app"]).create_app(options))
    schema = schemathesis.openapi.from_dict(httpx.get(app.url + "/openapi.json").json())
    good = base64.b64encode(_clip(1)).decode()
    statuses, failures = Counter(), []
    per_operation = {"POST": 1000, "GET": 60}
    started = time.perf_counter()
    secret = tmp_path / "secret.wav"  # a file of the server's that a playlist names
    secret.write_bytes(_clip(7))
    texts, hostile_audio, deep = strategies(str(secret))
    cpu = CpuMeter()
    clip = {"type": "input_audio", "input_audio": {"data": good, "format": "wav"}}
    warm = {"model": "m", "messages": [{"role": "user", "content": [clip, {"type": "text", "text": "Which?"}]}]}
    assert httpx.post(app.url + "/v1/chat/completions", json=warm, timeout=120).status_code == 200  # models loaded

    def with_a_clip(case, use: int, text: str, audio: str) -> None:
        """One body in six gets a real clip where the schema put random base64 (the deep path), one a
        hostile question with it, one a hostile clip."""
        if use > 2 or not isinstance(case.body, dict):
            return
        text = text if use == 1 else "Which?\n(A) one\n(B) two"
        audio = audio if use == 2 else good
        if case.path == "/v1/select":
            case.body.update(audio=audio, question=text)
        elif isinstance(case.body.get("messages"), list):
            case.body["messages"] = [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
                        {"type": "text", "text": text},
                    ],
                }  # fmt: skip
            ]

    def hostile_nesting(session) -> None:
        """Deeply nested bodies, sent as text (a client's ``json.dumps`` would recurse as deep)."""
        from hypothesis import given
        from hypothesis import strategies as st

        @fuzz_settings(60)
        @given(nested=deep, path=st.sampled_from(["/v1/chat/completions", "/v1/select"]))
        def call(nested, path):
            body = f'{{"model": "m", "messages": {nested}}}' if "chat" in path else f'{{"question": {nested}}}'
            response = cpu.measure(
                f"{path} nested {len(nested) // 2}",
                lambda: session.post(app.url + path, data=body, headers={"Content-Type": "application/json"}),
            )
            statuses[response.status_code] += 1
            if response.status_code >= 500:
                failures.append(("POST", path, response.status_code, response.text[:300]))

        call()

    def hostile_width(session) -> None:
        """Bodies of many small items wherever the schema has a list (messages, parts, choices, stop)."""
        from hypothesis import given

        @fuzz_settings(40)
        @given(sent=wide_bodies())
        def call(sent):
            path, body = sent
            response = cpu.measure(
                f"{path} wide {len(body)} bytes",
                lambda: session.post(app.url + path, data=body, headers={"Content-Type": "application/json"}),
            )
            statuses[response.status_code] += 1
            if response.status_code >= 500:
                failures.append(("POST", path, response.status_code, response.text[:300]))

        call()

    try:
        with __import__("requests").Session() as session, HealthWatch(app.url) as watch:
            for result in schema.get_all_operations():
                operation = result.ok()
                for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
                    examples = per_operation.get(operation.method.upper(), 60) // 2

                    @fuzz_settings(examples)
                    @given(
                        case=operation.as_strategy(generation_mode=mode),
                        use=st.integers(0, 5),
                        text=texts,
                        audio=hostile_audio,
                    )
                    def call(case, use, text, audio):
                        with_a_clip(case, use, text, audio)
                        response = cpu.measure(
                            f"{case.method} {case.path} ({use})",
                            lambda: case.call(base_url=app.url, session=session, timeout=60),
                        )
                        statuses[response.status_code] += 1
                        if response.status_code >= 500:
                            failures.append((case.method, case.path, response.status_code, response.text[:300]))

                    try:
                        call()
                    except Unsatisfiable:  # a GET has nothing to make invalid
                        pass
            hostile_nesting(session)
            hostile_width(session)
        assert httpx.get(app.url + "/health").json()["status"] == "ok"
    finally:
        app.stop()
        echo.httpd.shutdown()
    total = sum(statuses.values())
    print(
        f"\nAPI fuzzer: {total} requests in {time.perf_counter() - started:.0f} s, statuses "
        f"{dict(sorted(statuses.items()))}, {len(failures)} >= 500; the most CPU {cpu.worst:.2f} s "
        f"({cpu.worst_what}); /health at worst {watch.worst:.2f} s over {watch.polls} polls"
    )
    assert total >= FUZZ_REQUESTS and not failures, failures[:5]
    assert cpu.worst <= CPU_BOUND_S, (cpu.worst, cpu.worst_what)
    assert watch.worst <= HEALTH_BOUND_S and not watch.failures, (watch.worst, watch.failures)
    assert statuses[200] >= 100  # the fuzzer reached the plugin and the upstream, not only the refusals


def _event_strategy(max_event_bytes: int, secret: str):
    """One client frame: malformed or non-object JSON, a known event with fuzzed fields, a valid audio
    chunk, one over the size limit, or a hostile one (a long question, deep nesting)."""
    from hypothesis import strategies as st

    from autagent.serve.events import CLIENT_EVENTS

    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=10,
    )
    pcm = base64.b64encode((0.2 * 32767 * np.sin(np.arange(4800) / 3)).astype("<i2").tobytes()).decode()
    session = {"type": "realtime", "output_modalities": ["text"], "audio": {"input": {"format": {"type": "audio/pcm"}}}}
    known = st.builds(
        lambda kind, fields: json.dumps({**fields, "type": kind}),
        st.sampled_from([*CLIENT_EVENTS, "response.cancel", "session.frobnicate"]),
        st.dictionaries(st.sampled_from(["session", "item", "audio", "event_id", "response"]), json_values, max_size=3),
    )
    event = lambda kind, **fields: json.dumps({"type": kind, **fields})  # noqa: E731
    question = [{"type": "input_text", "text": "Tempo?\n(A) slow\n(B) fast"}]
    ask = event("conversation.item.create", item={"type": "message", "role": "user", "content": question})
    append, commit, respond = (
        event("input_audio_buffer.append", audio=pcm),
        event("input_audio_buffer.commit"),
        event("response.create"),
    )
    useful = st.sampled_from(
        [
            event("session.update", session=session),
            append,
            event("input_audio_buffer.append", audio=pcm[:-3]),  # odd and broken base64
            commit,
            respond,
            event("input_audio_buffer.clear"),
            ask,
        ]
    )
    raw = st.text(max_size=40) | json_values.map(json.dumps)
    oversized = st.just(event("input_audio_buffer.append", audio="A" * (max_event_bytes + 8)))
    turn = st.just([ask, *[append] * 6, commit, respond])  # a whole turn: question, audio, commit, response
    texts, _, deep = strategies(secret)
    hostile = st.one_of(
        texts.map(
            lambda text: event(
                "conversation.item.create",
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            )
        ),
        deep,
        deep.map(lambda nested: f'{{"type": "session.update", "session": {nested}}}'),
    )
    return st.one_of(useful, useful, known, raw, oversized, hostile).map(lambda frame: [frame]) | turn


def test_the_realtime_fuzz_leaves_every_session_and_the_service_up(tempo_plugin, tmp_path):
    from helpers.realtime import SESSION, Client
    from hypothesis import given
    from hypothesis import strategies as st
    from websockets.sync.client import connect

    from autagent.serve import create_app

    echo = Upstream("echo")
    options = service_options(tempo_plugin, tmp_path, upstream=echo.url, max_audio_seconds=4.0, max_realtime_sessions=4)
    app = InThread(create_app(options))
    url = app.url.replace("http://", "ws://") + "/v1/realtime"
    seen, started = Counter(), time.perf_counter()
    secret = tmp_path / "secret.wav"
    secret.write_bytes(_clip(7))
    cpu = CpuMeter()

    @fuzz_settings(100)  # derandomized: the same 100 sessions on every run, so the counts below are not luck
    @given(
        configure=st.booleans(),
        frames=st.lists(_event_strategy(options.max_event_bytes, str(secret)), min_size=1, max_size=12),
    )
    def session(configure, frames):
        cpu.measure(f"a session of {sum(map(len, frames))} frames", lambda: one_session(configure, frames))

    def one_session(configure, frames):
        for _ in range(300):  # a closed session counts until its work stops: wait for a place
            socket = connect(url, max_size=None, open_timeout=30)
            first = json.loads(socket.recv(timeout=30))
            if first["type"] == "session.created":
                break
            assert first["error"]["code"] == "session_limit_reached", first
            socket.close()
            time.sleep(0.1)
        with socket:
            if configure:  # half the sessions set up first: their audio, commits and responses go deeper
                socket.send(json.dumps({"type": "session.update", "session": SESSION}))
            for frame in [f for group in frames for f in group]:
                socket.send(frame)
            socket.send(json.dumps({"type": "sentinel.end", "event_id": "end"}))
            while True:  # every frame answered or taken, the session still there to answer the last one
                event = json.loads(socket.recv(timeout=60))
                seen[event["type"]] += 1
                if event["type"] == "error" and event["error"].get("event_id") == "end":
                    break
        seen["sessions"] += 1

    def a_whole_turn_completes():
        client = Client(app.url)
        client.send("session.update", session=SESSION)
        client.until("session.updated")
        client.ask("Tempo?\n(A) slow\n(B) fast")
        client.stream((0.3 * 32767 * np.sin(np.arange(2 * 24000) / 5)).astype(np.int16))
        assert client.answer()["response"]["status"] == "completed"
        client.close()

    try:
        a_whole_turn_completes()  # warm: the tools' first call (kernels, caches) is not a fuzzed session's CPU
        with HealthWatch(app.url) as watch:
            session()
        deadline = time.time() + 60
        while httpx.get(app.url + "/health").json()["realtime_sessions"] and time.time() < deadline:
            time.sleep(0.2)
        health = httpx.get(app.url + "/health").json()
        assert health["status"] == "ok" and health["realtime_sessions"] == 0
        a_whole_turn_completes()
    finally:
        app.stop()
        echo.httpd.shutdown()
    print(
        f"\nrealtime fuzz: {seen['sessions']} sessions in {time.perf_counter() - started:.0f} s, events {dict(seen)}; "
        f"the most CPU {cpu.worst:.2f} s ({cpu.worst_what}); /health at worst {watch.worst:.2f} s over {watch.polls}"
    )
    assert seen["sessions"] >= 100 and seen["response.created"] >= 10  # responses asked for, then dropped
    assert cpu.worst <= CPU_BOUND_S, (cpu.worst, cpu.worst_what)
    assert watch.worst <= HEALTH_BOUND_S and not watch.failures, (watch.worst, watch.failures)


def _proc(pid: int) -> tuple[float, int]:
    """(resident memory in MiB, threads) of process ``pid``."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) / 1024, int(status["Threads"])


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def test_the_soak_keeps_disk_memory_and_threads_bounded(tempo_plugin, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from websockets.sync.client import connect

    from autagent.testing.serve import spawn

    echo = Upstream("echo")
    audio_cap, tools_cap = 2 << 20, 512 << 10
    process, url = spawn(
        *("--plugin", str(tempo_plugin), "--upstream", echo.url, "--audio-dir", str(tmp_path / "audio")),
        *(
            "--audio-cache-mb",
            "2",
            "--max-concurrency",
            "4",
            "--max-realtime-sessions",
            "2",
            "--max-audio-seconds",
            "5",
        ),
        *("--set", f"tools.cache_dir={tmp_path / 'tools'}", "--set", "tools.cache_max_mb=0.5"),
        *("--set", f"answer_cache_dir={tmp_path / 'answers'}"),
        cwd=Path(__file__).resolve().parents[2],
    )
    text = {"type": "text", "text": "What is the tempo?\n(A) slow\n(B) fast"}
    rng = np.random.default_rng(0)

    def chat(data: str) -> int:
        body = {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}, text]}]}  # fmt: skip
        return httpx.post(url + "/v1/chat/completions", json=body, timeout=120).status_code

    def select(data: str) -> int:
        body = {"audio": data, "question": "What is the tempo?", "choices": ["slow", "fast"]}
        return httpx.post(url + "/v1/select", json=body, timeout=120).status_code

    def dropped_session(seed: int) -> None:
        pcm = (0.3 * 32767 * np.sin(np.arange(24000) * (0.05 + seed / 1000))).astype("<i2").tobytes()
        for _ in range(100):  # the cap counts sessions whose work has not stopped: wait for a place
            with connect(url.replace("http://", "ws://") + "/v1/realtime", open_timeout=30) as socket:
                if json.loads(socket.recv(timeout=30))["type"] == "error":
                    time.sleep(0.2)
                    continue
                session = {"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm"}}}}
                socket.send(json.dumps({"type": "session.update", "session": session}))
                socket.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}))
                socket.send(json.dumps({"type": "input_audio_buffer.commit"}))
                socket.send(json.dumps({"type": "response.create"}))
                for _ in range(3):  # up to response.created: then hang up mid-response
                    if json.loads(socket.recv(timeout=60))["type"] == "response.created":
                        break
                return

    def settle() -> tuple[float, int]:
        deadline = time.time() + 60
        while time.time() < deadline:
            health = httpx.get(url + "/health").json()
            if not health["in_flight"] and not health["realtime_sessions"]:
                break
            time.sleep(0.2)
        time.sleep(1.0)
        text = httpx.get(url + "/metrics").text
        pools = {pool: int(float(text.split(f'autagent_threads{{pool="{pool}"}} ')[1].split()[0])) for pool in POOLS}
        return (*_proc(process.pid), pools)

    try:
        clips = [base64.b64encode(_clip(seed)).decode() for seed in range(2200)]
        with ThreadPoolExecutor(8) as pool:  # the warm-up: more at once than the soak sends, each kind of work
            assert set(pool.map(chat, clips[2000:2150])) == {200}
            assert set(pool.map(select, clips[2150:2200])) == {200}
            list(pool.map(dropped_session, range(6)))
        rss0, threads0, pools0 = settle()
        started = time.perf_counter()
        statuses = Counter()
        with ThreadPoolExecutor(4) as pool:
            statuses.update(pool.map(lambda k: (chat if k % 2 else select)(clips[k]), range(2000)))
            junk = [base64.b64encode(b"RIFF" + rng.bytes(8000 + k)).decode() for k in range(200)]
            statuses.update(pool.map(chat, junk))
        requests_s = time.perf_counter() - started
        for seed in range(50):
            dropped_session(seed)
        seconds = time.perf_counter() - started
        rss1, threads1, pools1 = settle()
        audio, tools = _folder_bytes(tmp_path / "audio"), _folder_bytes(tmp_path / "tools")
    finally:
        process.terminate()
        process.wait(timeout=30)
        echo.httpd.shutdown()
    print(
        f"\nsoak: 2000 requests and 200 refused clips in {requests_s:.0f} s, then 50 dropped realtime sessions "
        f"({seconds:.0f} s in all); "
        f"statuses {dict(statuses)}; clips folder {audio / 2**20:.2f} MiB (cap 2), tool cache "
        f"{tools / 2**10:.0f} KiB (cap 512); RSS {rss0:.0f} -> {rss1:.0f} MiB (+{rss1 - rss0:.0f}, bound "
        f"{SOAK_RSS_MB}); threads {threads0} -> {threads1} (by pool {pools0} -> {pools1}; caps work 10, stream 4)"
    )
    assert statuses[200] == 2000 and statuses[400] == 200
    assert audio <= audio_cap and tools <= tools_cap + tools_cap // 16 + 4096
    assert rss1 - rss0 < SOAK_RSS_MB
    # the threads outside the service's two bounded pools come back to their count; the pools stay in their caps
    assert pools1["other"] <= pools0["other"] and pools1["work"] <= 10 and pools1["stream"] <= 4

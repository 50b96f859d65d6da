"""Tools a model calls itself: every tool as an OpenAI function tool, a time window honoured by cutting
the clip and cached per window, a plugin's manifest listing the function tools; the loop of
``autagent serve --agentic`` (two tools in two rounds, a client's own tools passed through, a
multi-turn conversation selected for once)."""

from __future__ import annotations

import json

import httpx
import pytest
from helpers.serve import (
    FIXTURES,
    TOOLS,
    ScriptUpstream,
    chat_message,
    router_plugin,
    start_agentic_service,
    tool_call,
)


def test_every_registered_tool_is_an_openai_function_tool_whose_only_arguments_are_a_window():
    from tools import registered
    from tools.clip_window import Window, WindowError

    for spec in registered():
        tool = spec.function
        assert tool["type"] == "function" and tool["function"]["name"] == spec.id
        assert tool["function"]["description"].startswith(spec.description.strip())
        schema = tool["function"]["parameters"]
        assert set(schema["properties"]) == {"start", "end"} and schema["additionalProperties"] is False
        assert not schema.get("required")
    assert Window.from_arguments({}) is None and Window.from_arguments({"start": 0}) is None
    assert Window.from_arguments({"start": 1.5, "end": 4}) == Window(1.5, 4.0)
    assert Window.from_arguments({"start": 2}) == Window(2.0, None)
    for bad, words in (
        ({"start": -1}, "start must be a number of seconds >= 0, got -1"),
        ({"end": "soon"}, "end must be a number"),
        ({"start": 3, "end": 2}, "end (2 s) must be after start (3 s)"),
        ({"start": True}, "start must be a number"),
        ({"end": 10**400}, "end must be a number of seconds >= 0, got 1000"),  # too large for a float: not a 500
        ({"clip": "/etc/passwd"}, "unknown arguments ['clip']"),
        ([1, 2], "must be a JSON object"),
    ):
        with pytest.raises(WindowError) as caught:
            Window.from_arguments(bad)
        assert words in str(caught.value)


def test_a_window_is_cut_from_the_clip_and_cached_under_the_clip_and_the_window(tmp_path, click_wav):
    """Clicks at 120 BPM over 10 s: the tempo tool given 2-6 s hears four seconds of them (beats inside
    0-4 s), the same window again is a cache hit, the whole clip keeps its own record, and a window
    after the clip's end is an error record naming the clip and the window."""
    from tools.clip_window import Window
    from tools.pool import PoolConfig, ToolPool

    path = str(click_wav[0])
    pool = ToolPool(PoolConfig(executor="local", cache_dir=str(tmp_path / "cache"), enabled=["tempo"]))
    whole = pool.run(path, ["tempo"])["tempo"]
    part = pool.run(path, ["tempo"], Window(2.0, 6.0))["tempo"]
    assert part["window"] == {"start": 2.0, "end": 6.0} and "window" not in whole
    assert max(part["output"]["beats"]) < 4.0 < max(whole["output"]["beats"])
    assert abs(part["output"]["bpm"] - 120) < 6
    computed = pool.computed
    assert pool.run(path, ["tempo"], Window(2.0, 6.0))["tempo"] == part and pool.computed == computed
    assert pool.run(path, ["tempo"])["tempo"] == whole and pool.computed == computed
    late = pool.run(path, ["tempo"], Window(60.0, None))["tempo"]
    assert late["error"] == f"{path}: the window starts at 60 s, after the clip ends (10.00 s)"
    assert not list((tmp_path / "cache" / ".windows").iterdir())  # no cut is left behind


def test_a_plugins_manifest_lists_its_tools_as_function_tools(tmp_path):
    from tools.registry import function_tools

    plugin = router_plugin(tmp_path / "p", [0.0] * len(TOOLS))
    manifest = json.loads((plugin / "manifest.json").read_text())
    assert manifest["function_tools"] == function_tools(TOOLS)
    assert [t["function"]["name"] for t in manifest["function_tools"]] == list(TOOLS)


# -- the loop in `serve --agentic` ---------------------------------------------------------------


def _chat_once(service, upstream, body: dict) -> httpx.Response:
    """One chat completion through the service; then the service and its upstream are stopped."""
    try:
        return httpx.post(service.url + "/v1/chat/completions", json=body, timeout=120)
    finally:
        service.stop()
        upstream.httpd.shutdown()


def _tool_messages(body) -> list[dict]:
    return [json.loads(m["content"]) for m in body["messages"] if m.get("role") == "tool"]


@pytest.fixture(scope="module")
def quiet_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("agentic-plugins") / "quiet", [-5.0] * len(TOOLS))


@pytest.fixture(scope="module")
def asr_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("agentic-plugins") / "asr", [5.0] + [-5.0] * (len(TOOLS) - 1))


def test_an_upstream_that_calls_two_tools_in_two_rounds_gets_both_records_and_answers(tmp_path, asr_plugin, tiny_bench):
    """The plugin selects asr (its record in front); the upstream calls tempo, then chords on a window,
    then answers; it was offered only the tools not selected, got both records as `tool` messages
    (the same records the pool gives), and the client gets its answer with every call listed."""
    from autagent.reasoners.prompts import shown
    from tools.clip_window import Window
    from tools.pool import PoolConfig, ToolPool

    def script(body, turn):
        return {
            1: {"content": None, "tool_calls": [tool_call("tempo")]},
            2: {"content": None, "tool_calls": [tool_call("chords", '{"start": 0.5, "end": 2.5}')]},
        }.get(turn, {"content": "the final answer"})

    upstream = ScriptUpstream(script)
    service, _ = start_agentic_service(tmp_path, asr_plugin, upstream.url)
    sample = tiny_bench["test"][0]
    reply = _chat_once(
        service, upstream, {"model": "m", "messages": chat_message(sample.audio, sample.question, sample.choices)}
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["choices"][0]["message"]["content"] == "the final answer"
    info = body["autagent"]
    assert info["tools"] == ["asr"] and info["rounds"] == 3 and info["selection"] == "new"
    assert [(c["tool"], c["round"], c.get("window")) for c in info["calls"]] == [
        ("tempo", 1, None),
        ("chords", 2, {"start": 0.5, "end": 2.5}),
    ]
    assert all(c["seconds"] >= 0 and "error" not in c for c in info["calls"])
    assert reply.headers["X-AutAgent-Tools"] == "asr,tempo,chords"
    first, second, third = upstream.seen
    offered = [t["function"]["name"] for t in first["tools"]]
    assert offered == [t for t in TOOLS if t != "asr"]
    assert first["messages"][0]["content"][1]["text"].startswith("The following outputs of acoustic analysis tools")
    assert '"tool": "asr"' in first["messages"][0]["content"][1]["text"]
    pool = ToolPool(PoolConfig(executor="local", cache_dir=str(FIXTURES), enabled=list(TOOLS)))
    tempo = pool.run(sample.audio, ["tempo"])["tempo"]
    chords = pool.run(sample.audio, ["chords"], Window(0.5, 2.5))["chords"]
    assert _tool_messages(second) == [shown(tempo)]  # the record as evaluation shows it to a reasoner
    assert _tool_messages(third) == [shown(tempo), {**shown(chords), "window": {"start": 0.5, "end": 2.5}}]
    assert third["messages"][1]["tool_calls"] == [tool_call("tempo")]  # the upstream's own call, as it wrote it
    assert [t["function"]["name"] for t in third["tools"]] == offered  # round 3 of 3 may still call


def test_calls_past_the_last_round_are_not_run_and_the_last_request_offers_no_tool(tmp_path, quiet_plugin, tiny_bench):
    upstream = ScriptUpstream(
        lambda body, turn: {"content": None, "tool_calls": [tool_call("tempo", call_id=f"c{turn}")]}
    )
    service, _ = start_agentic_service(tmp_path, quiet_plugin, upstream.url, max_tool_rounds=2)
    sample = tiny_bench["test"][0]
    reply = _chat_once(
        service, upstream, {"model": "m", "messages": chat_message(sample.audio, sample.question, sample.choices)}
    ).json()
    assert [bool(body.get("tools")) for body in upstream.seen] == [True, True, False]
    info = reply["autagent"]
    assert info["rounds"] == 3 and [c["round"] for c in info["calls"]] == [1, 2] and info["stopped"] == ["tempo"]
    assert "tool_calls" not in reply["choices"][0]["message"] and reply["choices"][0]["finish_reason"] == "stop"


def test_a_clients_own_tools_are_offered_beside_ours_and_their_calls_come_back_untouched(
    tmp_path, quiet_plugin, tiny_bench
):
    weather = {
        "type": "function",
        "function": {"name": "lookup_weather", "description": "The weather.", "parameters": {"type": "object"}},
    }
    theirs = tool_call("lookup_weather", '{"city": "Oslo"}', "call_theirs_1")

    def script(body, turn):
        return {"content": None, "tool_calls": [tool_call("tempo"), theirs]}

    upstream = ScriptUpstream(script)
    service, _ = start_agentic_service(tmp_path, quiet_plugin, upstream.url)
    sample = tiny_bench["test"][1]
    messages = chat_message(sample.audio, sample.question, sample.choices)
    body = {"model": "m", "messages": messages, "tools": [weather], "tool_choice": "auto"}
    reply = _chat_once(service, upstream, body).json()
    (seen,) = upstream.seen
    assert seen["tools"][0] == weather and [t["function"]["name"] for t in seen["tools"][1:]] == list(TOOLS)
    from autagent.serve.upstream_audio import for_upstream

    assert seen["messages"] == for_upstream(messages, "send", 16000)  # nothing selected: theirs, the clip at 16 kHz
    message = reply["choices"][0]["message"]
    assert message["tool_calls"] == [theirs] and reply["choices"][0]["finish_reason"] == "tool_calls"
    assert reply["autagent"]["calls"] == [] and reply["autagent"]["deferred"] == ["tempo"]


def test_a_multi_turn_conversation_is_selected_for_once_per_clip(tmp_path, asr_plugin, tiny_bench):
    """Turn two asks a new question about the same clip (sent in turn one only): no second selection,
    the same records stay in front of the clip's message, and the upstream is asked the new question."""

    def script(body, turn):
        return {"content": f"answer {turn}"}

    upstream = ScriptUpstream(script)
    service, options = start_agentic_service(tmp_path, asr_plugin, upstream.url)
    selections = []
    select = options.plugin.select
    options.plugin.select = lambda *args: selections.append(args) or select(*args)
    sample = tiny_bench["test"][2]
    first = chat_message(sample.audio, sample.question, sample.choices)
    follow_up = {"role": "user", "content": "And how sure are you?\n(A) very\n(B) not at all"}
    try:
        url = service.url + "/v1/chat/completions"
        one = httpx.post(url, json={"model": "m", "messages": first}, timeout=120).json()
        conversation = first + [one["choices"][0]["message"], follow_up]
        two = httpx.post(url, json={"model": "m", "messages": conversation}, timeout=120).json()
    finally:
        service.stop()
        upstream.httpd.shutdown()
    assert len(selections) == 1
    assert one["autagent"]["selection"] == "new" and two["autagent"]["selection"] == "reused"
    assert one["autagent"]["tools"] == two["autagent"]["tools"] == ["asr"]
    seen_one, seen_two = upstream.seen
    assert seen_two["messages"][0] == seen_one["messages"][0]  # the clip's message, records in front, unchanged
    assert seen_two["messages"][2] == follow_up and two["choices"][0]["message"]["content"] == "answer 2"


# -- the scripted caller and evaluation ---------------------------------------------------------


def test_the_scripted_caller_asks_for_the_best_described_tool_then_a_second_only_when_the_first_does_not_settle(
    tmp_path, click_wav
):
    from autagent.data.sample import Sample
    from autagent.reasoners import ReasonerConfig, build_reasoner
    from autagent.reasoners.scripted import ScriptedCaller, ScriptedCallerConfig
    from autagent.reasoners.tool_loop import file_audio_part, user_message
    from tools.registry import function_tools

    reasoner = build_reasoner(ReasonerConfig(), tmp_path / "answers")
    caller = ScriptedCaller(reasoner, ScriptedCallerConfig(max_calls=2), tmp_path / "audio")
    question, choices = "What is the tempo of this clip?", ["60 BPM", "120 BPM", "180 BPM"]
    seven = ["asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers"]
    tempo = {"tool": "tempo", "output": {"bpm": 120.3, "beats": [0.1, 0.6, 1.1]}}
    emotion = {"tool": "emotion", "output": {"label": "happy", "scores": {"happy": 0.9}, "method": "prosody"}}

    def ask(records, offered, calls=()):
        messages = [user_message(file_audio_part(str(click_wav[0])), question, choices, records)]
        for k, name in enumerate(calls):
            messages.append({"role": "assistant", "content": None, "tool_calls": [tool_call(name, call_id=f"c{k}")]})
            messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": json.dumps(emotion)})
        message = caller.complete({"messages": messages, "tools": function_tools(offered)})["choices"][0]["message"]
        return [c["function"]["name"] for c in message.get("tool_calls") or []] or message["content"]

    assert ask(None, seven) == ["tempo"]  # its description is the most like the question
    sample = Sample("s", str(click_wav[0]), question, tuple(choices), "120 BPM")
    (expected,) = reasoner.ask([(sample, [dict(tempo, presented=True)])])
    assert ask([tempo], [t for t in seven if t != "tempo"]) == expected.text == "120 BPM"  # settled: answers
    assert ask([emotion], [t for t in seven if t != "emotion"]) == ["tempo"]  # not settled: a second tool
    assert isinstance(ask(None, seven, calls=["emotion", "asr"]), str)  # two calls made: it answers
    assert isinstance(ask(None, []), str)  # nothing offered: it answers


def test_serve_agentic_in_front_of_the_scripted_caller(tmp_path, quiet_plugin, click_wav):
    """`serve --reasoner scripted` (the stand-in for a model that calls tools) behind `serve --agentic`:
    it asks for the tempo tool, reads the record, and answers."""
    scripted, _ = start_agentic_service(tmp_path / "scripted", reasoner="scripted")
    front, _ = start_agentic_service(tmp_path / "front", quiet_plugin, scripted.url + "/v1")
    try:
        reply = httpx.post(
            front.url + "/v1/chat/completions",
            json={"model": "m", "messages": chat_message(click_wav[0], "What is the tempo?", ["60 BPM", "120 BPM"])},
            timeout=120,
        ).json()
        streamed = httpx.post(
            front.url + "/v1/chat/completions",
            json={
                "model": "m",
                "stream": True,
                "messages": chat_message(click_wav[0], "What is the tempo?", ["60 BPM", "120 BPM"]),
            },
            timeout=120,
        ).text
    finally:
        front.stop()
        scripted.stop()
    info = reply["autagent"]
    assert [c["tool"] for c in info["calls"]] == ["tempo"] and info["rounds"] == 2
    assert reply["choices"][0]["message"]["content"] == "120 BPM"
    chunks = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "120 BPM"
    assert chunks[-1]["autagent"]["calls"][0]["tool"] == "tempo"


def test_eval_runs_the_agentic_methods_and_with_no_rounds_agentic_answers_as_the_policy(tmp_path, tiny_bench):
    from autagent.config import load_config
    from autagent.reasoners import build_reasoner
    from autagent.recipes.evaluate import Held, load_policy, score

    def run_eval(config, out, plugin, samples, records, name):  # what a training run hands its scoring
        reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
        try:
            return score(config, out, Held(samples, records, name, reasoner, load_policy(plugin, config), plugin))
        finally:
            reasoner.close()

    plugin = router_plugin(tmp_path / "p", [5.0, -5.0, -5.0, 5.0, -5.0, -5.0])  # always asr and tempo
    samples = tiny_bench["test"][:8]
    records = {s.id: tiny_bench["records"][s.id] for s in samples}
    overrides = {
        "answer_cache_dir": str(tmp_path / "answers"),
        "tools.cache_dir": str(FIXTURES),
        "tools.executor": "local",
        "eval.methods": ["policy", "agentic", "agentic_only"],
        "eval.plots": False,
        "eval.cost_curve": False,  # the dial's curve is tests/test_dial.py's: here it cost 69 of 87 s
        "eval.agentic.audio_dir": str(tmp_path / "audio"),
    }
    config = load_config(None, overrides)
    metrics = run_eval(config, tmp_path / "eval", plugin, samples, records, "tiny")["methods"]
    only, both = metrics["agentic_only"], metrics["agentic"]
    assert 0 < only["calls"] <= 2 and only["rounds"] == pytest.approx(only["calls"] + 1)
    assert both["avg_tools"] == pytest.approx(2 + both["calls"]) and both["caller"].startswith("scripted")
    rows = [json.loads(line) for line in (tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()]
    assert all(r["tools"][:2] == ["asr", "tempo"] for r in rows if r["method"] == "agentic")
    config = load_config(None, {**overrides, "eval.agentic.max_rounds": 0})
    metrics = run_eval(config, tmp_path / "eval0", plugin, samples, records, "tiny")["methods"]
    rows = [json.loads(line) for line in (tmp_path / "eval0" / "predictions.jsonl").read_text().splitlines()]
    policy = [r["prediction"] for r in rows if r["method"] == "policy"]
    assert [r["prediction"] for r in rows if r["method"] == "agentic"] == policy
    assert metrics["agentic"]["calls"] == 0 and metrics["agentic"]["accuracy"] == metrics["policy"]["accuracy"]

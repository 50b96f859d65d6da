"""Against vLLM itself (PyPI's CPU build in ``.venv-vllm``, ``make setup-vllm``): ``autagent serve`` in front
of vLLM serving a random Qwen2-Audio (clips as ``input_audio`` and ``audio_url``, streaming, ``/v1/realtime``,
``--agentic`` with vLLM's tool-call parser, vLLM's own refusals), and the cascade over HTTP: vLLM serving
the cascade's Gemma 3 270M answers as the in-process cascade does, and ``autagent adapt`` against it keeps
its budget.  Each vLLM is started once for the whole session (60-90 s each on a busy CPU).  Every test
skips, saying so, only where ``.venv-vllm`` is absent; the summary line ``vLLM tests:`` counts them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import numpy as np
import pytest
from helpers.serve import FIXTURES, chat_message, router_plugin, start_agentic_service, start_service

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-vllm"
AUDIO_MODEL = "tiny-qwen2-audio"
TEXT_MODEL = "gemma-3-270m"
CHAT = "/v1/chat/completions"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(  # `make test-vllm` sets AUTAGENT_REQUIRE_VLLM=1: there an absent venv fails instead
        not (VENV / "bin" / "python").exists() and os.environ.get("AUTAGENT_REQUIRE_VLLM") != "1",
        reason=".venv-vllm is absent: `make setup-vllm` installs vLLM's CPU build",
    ),
]


def _vllm(model, name: str, log: Path, *args: str):
    from autagent.serve.vllm import start

    # eager: no compilation at start (minutes on a busy CPU)
    args = ["--served-model-name", name, "--enforce-eager", *args]
    return start(model, args=args, venv=VENV, log=log, timeout_s=1200)


@pytest.fixture(scope="session")
def vllm_audio(tmp_path_factory):
    """vLLM serving a random Qwen2-Audio 128 wide (head dim 64, what its CPU attention takes), its tool-call
    parser on, replies greedy and at most 16 tokens unless a request says otherwise."""
    from autagent.reasoners.prompts import BASELINE, WITH_TOOLS
    from autagent.serve.vllm import stop
    from autagent.testing.tiny_models import build_tiny_qwen2_audio

    root = tmp_path_factory.mktemp("vllm-audio")
    model = build_tiny_qwen2_audio(root / "model", prompts=[BASELINE, WITH_TOOLS], width=128)
    log = root / "vllm.log"
    defaults = json.dumps({"max_new_tokens": 16, "temperature": 0.0})
    process, url = _vllm(
        model,
        AUDIO_MODEL,
        log,
        "--max-model-len",
        "2048",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--override-generation-config",
        defaults,
    )
    yield {"url": url, "log": log}
    stop(process)


@pytest.fixture(scope="session")
def vllm_text(tmp_path_factory):
    """vLLM serving the cascade's Gemma 3 270M (the converted folder ``make setup`` makes) in float32."""
    from autagent.reasoners.cascade import CascadeReasonerConfig
    from autagent.reasoners.cascade.weights import ensure_converted
    from autagent.serve.vllm import stop

    log = tmp_path_factory.mktemp("vllm-text") / "vllm.log"
    folder = ensure_converted(CascadeReasonerConfig().cache_dir)  # where make setup converts it
    process, url = _vllm(folder, TEXT_MODEL, log, "--dtype", "float32", "--max-model-len", "1024")
    yield {"url": url, "log": log, "folder": folder}
    stop(process)


@pytest.fixture(scope="module")
def calls_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("vllm-plugin"), [3.0, -3.0, -3.0, 3.0, -3.0, -3.0])  # asr, tempo


def _service(plugin, tmp, url, **limits):
    overrides = {"tools.cache_dir": str(FIXTURES)}
    return start_service(plugin, tmp, url, overrides, model=AUDIO_MODEL, upstream_timeout_s=120.0, **limits)


def _requests_seen(log: Path, path: str) -> int:
    return sum(f"POST {path} " in line for line in log.read_text(errors="replace").splitlines())


def test_clips_as_input_audio_and_audio_url_reach_vllm_at_16_khz(vllm_audio, calls_plugin, tiny_bench, tmp_path):
    """A 22.05 kHz clip with the records: vLLM hears it (its prompt holds the clip's audio tokens), as
    ``input_audio`` and as an ``audio_url`` data: URL; the same clip sent at its own rate is vLLM's own
    failure (it cannot resample without torchaudio), a 502 for the client; dropped, only the text goes."""
    sample = tiny_bench["test"][0]
    assert __import__("soundfile").info(sample.audio).samplerate == 22050
    messages = chat_message(sample.audio, sample.question, sample.choices)
    data = messages[0]["content"][0]["input_audio"]["data"]
    as_url = [
        {**messages[0], "content": [{"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{data}"}}]}
    ]
    as_url[0]["content"].append(messages[0]["content"][1])
    usage = {}
    for mode, rate in (("send", 16000), ("drop", 16000), ("send", 0)):
        service = _service(
            calls_plugin, tmp_path / f"{mode}{rate}", vllm_audio["url"], upstream_audio=mode, upstream_sample_rate=rate
        )
        try:
            for name, body in (("input_audio", messages), ("audio_url", as_url)):
                reply = httpx.post(
                    service.url + "/v1/chat/completions", json={"model": "m", "messages": body}, timeout=180
                )
                if rate == 0:  # vLLM's own failure (no torchaudio to resample with), refused or a 502
                    assert reply.status_code in (400, 502), reply.text
                    assert "upstream" in reply.json()["error"]["message"]
                    continue
                assert reply.status_code == 200, reply.text
                answer = reply.json()
                assert answer["autagent"]["tools"] == ["asr", "tempo"] and answer["model"] == AUDIO_MODEL
                assert isinstance(answer["choices"][0]["message"]["content"], str)
                usage[mode, name] = answer["usage"]["prompt_tokens"]
        finally:
            service.stop()
    assert usage["send", "input_audio"] == usage["send", "audio_url"]
    assert usage["send", "input_audio"] > usage["drop", "input_audio"] + 50  # the clip's audio tokens


def test_a_streamed_answer_comes_through_chunk_by_chunk(vllm_audio, calls_plugin, tiny_bench, tmp_path):
    sample = tiny_bench["test"][1]
    body = {"model": "m", "messages": chat_message(sample.audio, sample.question, sample.choices)}
    body |= {"max_tokens": 8, "min_tokens": 8, "temperature": 0.0}
    service = _service(calls_plugin, tmp_path, vllm_audio["url"])
    try:
        whole = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=180).json()
        with httpx.stream(
            "POST", service.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=180
        ) as r:
            assert r.status_code == 200 and r.headers["x-autagent-tools"] == "asr,tempo"
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
    finally:
        service.stop()
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert len([p for p in pieces if p]) >= 4  # token by token, not one block
    assert "".join(p or "" for p in pieces) == whole["choices"][0]["message"]["content"]


def test_a_realtime_session_ends_in_vllms_answer(vllm_audio, calls_plugin, tiny_bench, tmp_path):
    import librosa
    from helpers.realtime import RATE, SESSION, Client

    sample = tiny_bench["test"][2]
    pcm = (librosa.load(sample.audio, sr=RATE)[0] * 32767).astype(np.int16)
    service = _service(calls_plugin, tmp_path, vllm_audio["url"])
    before = _requests_seen(vllm_audio["log"], "/v1/chat/completions")
    try:
        client = Client(service.url)
        client.send("session.update", session=SESSION)
        client.until("session.updated")
        client.ask(sample.question + "\n" + "\n".join(f"({chr(65 + i)}) {c}" for i, c in enumerate(sample.choices)))
        client.stream(pcm)
        done = client.answer()
        client.close()
    finally:
        service.stop()
    response = done["response"]
    assert response["status"] == "completed", response
    assert response["autagent"]["tools"] == ["asr", "tempo"]
    assert isinstance(response["output"][0]["content"][0]["text"], str)
    assert _requests_seen(vllm_audio["log"], "/v1/chat/completions") == before + 1


def test_agentic_requests_with_tools_are_accepted_by_vllms_tool_parser(vllm_audio, tiny_bench, tmp_path):
    sample = tiny_bench["test"][3]
    service, _ = start_agentic_service(tmp_path, upstream=vllm_audio["url"], model=AUDIO_MODEL)
    try:
        body = {"model": "m", "messages": chat_message(sample.audio, sample.question, sample.choices)}
        reply = httpx.post(service.url + "/v1/chat/completions", json=body, timeout=300)
    finally:
        service.stop()
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["role"] == "assistant"


def test_vllms_own_refusal_is_the_clients_4xx_never_a_500(vllm_audio, calls_plugin, tiny_bench, tmp_path):
    sample = tiny_bench["test"][4]
    long_text = sample.question + " " + " ".join(f"word{i}" for i in range(3000))
    messages = chat_message(sample.audio, long_text, sample.choices)
    service = _service(calls_plugin, tmp_path, vllm_audio["url"])
    try:
        reply = httpx.post(service.url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=180)
    finally:
        service.stop()
    # vLLM refuses a prompt past its context with a 400 of its own: the client gets that 400 and vLLM's own
    # words (a 502 here would be the service failing to pass the refusal on, which this test once let through)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "upstream_refused" and "Traceback" not in reply.text
    prefix = "the upstream refused the request: HTTP 400: "
    assert error["message"].startswith(prefix) and len(error["message"]) > len(prefix) + 10, error["message"]


def _cascade_requests(tiny_bench, n: int = 40, tools=("chords", "emotion", "pitch", "tempo")):
    """The first ``n`` test items, each shown its records of ``tools`` (the asr, sound-event and speaker
    records would triple the prompts: vLLM scores every prompt token over the whole vocabulary)."""
    return [(s, [tiny_bench["records"][s.id][t] for t in tools]) for s in tiny_bench["test"][:n]]


def test_the_cascade_over_vllm_answers_as_the_cascade_in_process(vllm_text, tiny_bench):
    """Gemma 3 270M in float32, in process and served by vLLM, over 40 test items shown four tools'
    records: the same answer on at least 95 % of them (the same token ids, laid out and calibrated by the
    same code; what differs is the kernels: a near-tie may fall either way)."""
    from autagent.reasoners.cascade import CascadeReasoner, CascadeReasonerConfig
    from autagent.reasoners.openai_compat import OpenAIConfig, OpenAIReasoner

    layout = CascadeReasonerConfig(dtype="float32", model_dir=str(vllm_text["folder"]))
    requests = _cascade_requests(tiny_bench)
    local = CascadeReasoner(layout).answer_many(requests)
    config = OpenAIConfig(vllm_text["url"], TEXT_MODEL, audio="drop", scoring="logprobs", timeout_s=600.0)
    served = OpenAIReasoner(config, layout)
    remote = served.answer_many(requests)
    assert served.scoring_used == "logprobs" and all(r.error is None for r in remote)
    same = [a.text == b.text for a, b in zip(local, remote)]
    gaps = [max(abs(x - y) for x, y in zip(a.scores, b.scores)) for a, b in zip(local, remote)]
    for (sample, _), a, b, agree in zip(requests, local, remote, same):
        if not agree:
            margin = sorted(a.scores)[-1] - sorted(a.scores)[-2]
            print(f"differs on {sample.id}: in process {a.text!r} (margin {margin:.3f}), over vLLM {b.text!r}")
    print(f"agreement {sum(same)}/{len(same)}; largest score difference {max(gaps):.4f}, median {np.median(gaps):.4f}")
    assert sum(same) >= 0.95 * len(same)


def test_autagent_adapt_against_vllm_keeps_its_budget_and_eval_scores_the_plugin(
    vllm_text, calls_plugin, tiny_bench, tmp_path, capsys
):
    """``autagent adapt --reasoner openai --budget 300`` against the cascade over vLLM: 300 distinct answers
    asked (the answer cache holds exactly those, and vLLM saw no more scoring requests than they need),
    a plugin written; ``autagent eval --reasoner openai`` scores it."""
    import yaml

    from autagent.cli import main

    tools = ["tempo", "pitch", "emotion"]  # short records: the answers stay cheap on a busy CPU
    plugin = router_plugin(tmp_path / "source", [3.0, -3.0, -3.0], tuple(tools))
    test_path, folder = tmp_path / "test.json", tiny_bench["paths"]["test"].parent
    rows = json.loads(tiny_bench["paths"]["test"].read_text())[:8]  # evaluation is outside the budget: kept short
    test_path.write_text(json.dumps([{**r, "audio_id": str(folder / r["audio_id"])} for r in rows]))
    config = {
        "data": {"train": str(tiny_bench["paths"]["train"]), "test": str(test_path)},
        "tools": {"executor": "local", "cache_dir": str(tiny_bench["cache"]), "enabled": tools},
        "reasoner": {
            "kind": "openai",
            "openai": {"base_url": vllm_text["url"], "model": TEXT_MODEL, "audio": "drop", "scoring": "logprobs"}
            | {"timeout_s": 600.0},
            "cascade": {"dtype": "float32"},
        },
        "eval": {"methods": ["no_tool", "policy"]},
        "output_dir": str(tmp_path / "runs"),
        "answer_cache_dir": str(tmp_path / "answers"),
        "logging": {"wandb": False, "progress": False},
    }
    path = tmp_path / "adapt.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "adapted"
    fast = ["--set", "grpo.steps=20", "--set", "policy.router.table.crossval.folds=0"]
    before = _requests_seen(vllm_text["log"], "/v1/completions")
    command = ["adapt", "--plugin", str(plugin), "--reasoner", "openai", "--out", str(out), "--budget", "300"]
    assert main([*command, "--config", str(path), *fast]) == 0
    printed = capsys.readouterr().out
    assert "answers: 300 of a budget of 300" in printed, printed
    (cache,) = (tmp_path / "answers").glob("openai-*.jsonl")
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    assert len(rows) == 300 and all(len(r["scores"]) >= 2 for r in rows)  # every answer scored, none twice
    requests = _requests_seen(vllm_text["log"], "/v1/completions") - before
    assert 0 < requests <= 300  # prompts go many to a request
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["metrics"]["training"]["table"]["answers_spent"] == 300
    assert "scoring logprobs" in manifest["metrics"]["training"]["reasoner_where"]
    evaluated = tmp_path / "eval"
    assert (
        main(["eval", "--config", str(path), "--plugin", str(out), "--reasoner", "openai", "--out", str(evaluated)])
        == 0
    )
    metrics = json.loads((evaluated / "metrics.json").read_text())
    assert set(metrics["methods"]) == {"no_tool", "policy"} and metrics["reasoner_failures"] == 0
    assert "scoring logprobs" in metrics["reasoner_where"]
    policy = metrics["methods"]["policy"]
    print(f"adapt: {requests} /v1/completions requests for 300 answers; eval: policy accuracy {policy['accuracy']}")

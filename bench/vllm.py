#!/usr/bin/env python
"""A real vLLM in the loop, measured (prints figures and writes them as JSON; not a test).

Needs ``make setup-vllm``.  In one run, on the same items, on whatever else the machine is running:

* **the cascade in process against the cascade over vLLM** (Gemma 3 270M, ``--dtype``, each item shown
  all its records): seconds per answer when questions come one at a time (concurrency 1) and eight at a
  time (``answer_many`` of 8: one pass in process; over HTTP their prompts in one ``/v1/completions``
  request), after a warm-up pass that also computes every choice's calibration; the answers' agreement;
* **``autagent adapt --budget N``** (default 300: 3,000 answers take hours of prompt scoring on two busy
  cores) against the cascade in process and over vLLM: wall time, answers asked, vLLM's requests;
* **the service's own cost in front of vLLM** (``bench/serve.py``'s measurement, its upstream a vLLM
  serving a random 128-wide Qwen2-Audio, beside the embedded stand-in it measures otherwise): requests
  per second, latency and the per-request overhead (through the service minus the same forwarded request
  sent straight to the upstream).

Usage: .venv/bin/python bench/vllm.py [--out docs/results/records/vllm.json] [--items 24] [--budget 300]
       [--dtype bfloat16|float32] [--parts cascade,adapt,serve]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("OMP_NUM_THREADS", "1")

import serve as serve_bench  # noqa: E402 - bench/serve.py, beside this file

SEVEN = ["asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers"]
TEXT_MODEL, AUDIO_MODEL = "gemma-3-270m", "tiny-qwen2-audio"
EAGER = ["--enforce-eager"]
"""vLLM without compilation: its start compiles for minutes on a busy CPU (a GPU user would compile)."""


def fixture_data() -> Path:
    """The tests' tiny benchmark (``tests/conftest.py``'s ``tiny_bench``: run a test that uses it first)."""
    found = sorted((ROOT / ".cache" / "tests").glob("bench-*/data/test.json"))
    if not found:
        sys.exit("no .cache/tests/bench-*/data: run `pytest tests/serve/test_served_scoring.py` or any tiny_bench test")
    return found[-1].parent


def records_of(samples, tools=SEVEN) -> dict:
    from tools.pool import PoolConfig, ToolPool

    pool = ToolPool(PoolConfig(executor="local", cache_dir=str(ROOT / ".cache/tests/tools"), enabled=list(tools)))
    return dict(zip([s.id for s in samples], pool.run_many([s.audio for s in samples])))


def count(log: Path, path: str) -> int:
    return sum(f"POST {path} " in line for line in log.read_text(errors="replace").splitlines())


def timed_answers(reasoner, requests, at_once: int) -> tuple[float, list]:
    """Seconds per answer and the replies, ``at_once`` requests per ``answer_many``."""
    started, replies = time.perf_counter(), []
    for i in range(0, len(requests), at_once):
        replies += reasoner.answer_many(requests[i : i + at_once])
    return (time.perf_counter() - started) / len(requests), replies


def cascade_part(args, url: str, samples, records) -> dict:
    from autagent.reasoners.cascade import CascadeReasoner, CascadeReasonerConfig
    from autagent.reasoners.openai_compat import OpenAIConfig, OpenAIReasoner

    layout = CascadeReasonerConfig(dtype=args.dtype)
    requests = [(s, [records[s.id][t] for t in SEVEN]) for s in samples]
    local = CascadeReasoner(layout)
    config = OpenAIConfig(url, TEXT_MODEL, audio="drop", scoring="logprobs", max_concurrency=8, timeout_s=600.0)
    served = OpenAIReasoner(config, layout)
    timed_answers(local, requests[:2], 2)  # models warm (a neutral prompt costs a few tokens: not warmed)
    timed_answers(served, requests[:2], 2)
    rows, answers = {}, {}
    for at_once in (1, 8):
        local_s, answers["local"] = timed_answers(local, requests, at_once)
        served_s, answers["served"] = timed_answers(served, requests, at_once)
        rows[at_once] = {"in_process_s": local_s, "vllm_s": served_s, "ratio": served_s / local_s}
        print(
            f"cascade, {at_once} question(s) at a time: in process {local_s:.3f} s/answer, over vLLM "
            f"{served_s:.3f} s/answer: vLLM / in process = {served_s / local_s:.2f}"
        )
    agree = sum(a.text == b.text for a, b in zip(answers["local"], answers["served"]))
    gaps = [max(abs(x - y) for x, y in zip(a.scores, b.scores)) for a, b in zip(answers["local"], answers["served"])]
    print(
        f"agreement in process / over vLLM ({args.dtype}): {agree}/{len(requests)}; score difference median "
        f"{statistics.median(gaps):.4f}, largest {max(gaps):.4f}"
    )
    return {
        "items": len(requests),
        "dtype": args.dtype,
        "scoring": served.scoring_used,
        "agreement": agree / len(requests),
        "agree": agree,
        "score_difference": {"median": statistics.median(gaps), "max": max(gaps)},
        "seconds_per_answer": rows,
    }


def adapt_part(args, url: str, data: Path, work: Path, log: Path) -> dict:
    """``autagent adapt --budget N`` against the cascade in process and over vLLM (three short tools)."""
    import yaml

    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.serve import router_plugin

    tools = ["tempo", "pitch", "emotion"]
    plugin = router_plugin(work / "source", [3.0, -3.0, -3.0], tuple(tools))
    out = {}
    for kind in ("cascade", "openai"):
        folder = work / f"adapt-{kind}"
        config = {
            "data": {"train": str(data / "train.json"), "test": str(data / "test.json")},
            "tools": {"executor": "local", "cache_dir": str(ROOT / ".cache/tests/tools"), "enabled": tools},
            "reasoner": {
                "kind": kind,
                "openai": {"base_url": url, "model": TEXT_MODEL, "audio": "drop", "scoring": "logprobs"}
                | {"timeout_s": 600.0},
                "cascade": {"dtype": args.dtype},
            },
            "output_dir": str(folder / "runs"),
            "answer_cache_dir": str(folder / "answers"),
            "logging": {"wandb": False, "progress": False},
        }
        path = folder / "adapt.yaml"
        folder.mkdir(parents=True)
        path.write_text(yaml.safe_dump(config))
        before = count(log, "/v1/completions")
        command = [sys.executable, "-m", "autagent.cli", "adapt", "--plugin", str(plugin), "--reasoner", kind]
        command += ["--out", str(folder / "plugin"), "--budget", str(args.budget), "--config", str(path)]
        command += ["--set", "policy.router.table.crossval.folds=0"]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"autagent adapt ({kind}) failed: {done.stderr.decode()[-2000:]}")
        training = json.loads((folder / "plugin" / "manifest.json").read_text())["metrics"]["training"]
        out[kind] = {
            "wall_s": seconds,
            "answers": training["table"]["answers_spent"],
            "vllm_requests": count(log, "/v1/completions") - before,
            "reasoner": training.get("reasoner_where"),
        }
        print(f"autagent adapt --budget {args.budget} against the cascade {kind}: {seconds:.0f} s, {out[kind]}")
    out["ratio"] = out["openai"]["wall_s"] / out["cascade"]["wall_s"]
    print(f"autagent adapt, over vLLM / in process: {out['ratio']:.2f}")
    return out


def serve_part(args, work: Path, samples, audio_url: str, vllm_pid: int) -> dict:
    """bench/serve.py's measurement with vLLM (random Qwen2-Audio) upstream, and with its embedded stand-in."""
    from autagent import Plugin
    from autagent.serve.upstream_audio import for_upstream

    plugin_dir = serve_bench.synthetic_plugin(work / "plugin")
    plugin = Plugin.load(plugin_dir, audio_dir=work / "audio")
    bodies = [{"model": AUDIO_MODEL, "messages": serve_bench.message(s)} for s in samples[: args.serve_requests]]
    levels = [1, 8]
    stand_in, stand_in_url = serve_bench.start("--reasoner", "embedded", cache=work / "stand-in")
    upstreams = {"vLLM": (audio_url, vllm_pid), "embedded stand-in": (stand_in_url + "/v1", stand_in.pid)}
    results, started = {}, [stand_in]
    try:
        for name, (url, pid) in upstreams.items():
            front, front_url = serve_bench.start(
                "--plugin", str(plugin_dir), "--upstream", url, "--model", AUDIO_MODEL, cache=work / name.split()[0]
            )
            started.append(front)
            forward = lambda messages: for_upstream(plugin.augment(messages), "send", 16000)  # noqa: E731
            measured = serve_bench.measure(
                {name: (front_url, front.pid)},
                (url.removesuffix("/v1"), pid),
                bodies,
                plugin,
                levels,
                1,
                args.overhead,
                forward,
            )[name]
            serve_bench.report(f"the service in front of the {name}", measured)
            results[name] = {
                "rows": {
                    c: {
                        "rps": r["rps"],
                        "p50_s": serve_bench.percentile(r["total"], 0.5),
                        "upstream_p50_s": serve_bench.percentile(r["upstream"], 0.5),
                    }
                    for c, r in measured["rows"].items()
                },
                "overhead_median_s": statistics.median(measured["overhead"]),
                "overhead_interval_s": serve_bench.median_interval(measured["overhead"]),
                "overhead_p90_s": serve_bench.percentile(measured["overhead"], 0.9),
                "service_cpu_s": measured["cpu"],
                "requests": len(measured["overhead"]),
            }
    finally:
        for process in started:
            process.terminate()
            process.wait(timeout=30)
    a, b = results["vLLM"]["overhead_median_s"], results["embedded stand-in"]["overhead_median_s"]
    print(f"the service's overhead, in front of vLLM / of the stand-in: {1000 * a:.1f} / {1000 * b:.1f} ms")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/results/records/vllm.json", help="the figures as JSON")
    parser.add_argument("--items", type=int, default=24, help="test items the cascade answers")
    parser.add_argument("--budget", type=int, default=300, help="autagent adapt's budget of answers")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--serve-requests", type=int, default=16, help="questions sent at each level of clients")
    parser.add_argument("--overhead", type=int, default=64, help="requests whose overhead is measured")
    parser.add_argument("--parts", default="cascade,adapt,serve")
    args = parser.parse_args()

    from autagent.data.loaders import load_dataset
    from autagent.reasoners.cascade import CascadeReasonerConfig
    from autagent.reasoners.cascade.weights import ensure_converted
    from autagent.serve import vllm

    parts = set(args.parts.split(","))
    data = fixture_data()
    samples = load_dataset(data / "test.json")[: args.items]
    records = records_of(samples)
    work = Path(tempfile.mkdtemp(prefix="autagent-bench-vllm-"))
    figures = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared)",
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "dtype": args.dtype,
    }
    try:
        if parts & {"cascade", "adapt"}:
            log = work / "vllm-text.log"
            started = time.perf_counter()
            args_text = ["--served-model-name", TEXT_MODEL, "--dtype", args.dtype, "--max-model-len", "1024", *EAGER]
            process, url = vllm.start(ensure_converted(CascadeReasonerConfig().cache_dir), args=args_text, log=log)
            figures["vllm_start_s"] = time.perf_counter() - started
            print(f"vLLM (Gemma 3 270M, {args.dtype}) answered /health after {figures['vllm_start_s']:.0f} s")
            try:
                if "cascade" in parts:
                    figures["cascade"] = cascade_part(args, url, samples, records)
                if "adapt" in parts:
                    figures["adapt"] = adapt_part(args, url, data, work, log)
            finally:
                vllm.stop(process)
        if "serve" in parts:
            from autagent.reasoners.prompts import BASELINE, WITH_TOOLS
            from autagent.testing.tiny_models import build_tiny_qwen2_audio

            model = build_tiny_qwen2_audio(work / "qwen2-audio", prompts=[BASELINE, WITH_TOOLS], width=128)
            defaults = json.dumps({"max_new_tokens": 16, "temperature": 0.0})
            audio_args = ["--served-model-name", AUDIO_MODEL, "--max-model-len", "2048", *EAGER]
            process, url = vllm.start(model, args=[*audio_args, "--override-generation-config", defaults])
            try:
                figures["serve"] = serve_part(args, work, samples, url, process.pid)
            finally:
                vllm.stop(process)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

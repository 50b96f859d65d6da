#!/usr/bin/env python
"""The plugin service under load (prints figures; not a test).

Starts ``autagent serve --reasoner embedded`` (the upstream) and, in front of it, ``autagent serve
--plugin P --upstream ...``, both on loopback ports, and sends the embedded benchmark's test questions
as OpenAI chat requests (the clip as ``input_audio``):

* at 1, 8 and 32 concurrent clients: requests per second, and p50 / p90 latency of the whole request
  and of each stage the service reports (selection, tools, upstream);
* the service's own overhead: each request sent through the plugin service, against the very
  messages it forwards (records included) sent straight to the upstream, tools already cached
  (median of the per-request differences, ms).

Usage: .venv/bin/python bench/serve.py [--plugin runs/embedded_main/plugin] [--requests 48]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def start(*args: str, cache: Path) -> tuple[subprocess.Popen, str]:
    from autagent.serve import spawn

    cache_set = ["--set", f"answer_cache_dir={cache / 'answers'}"]
    return spawn(
        "--max-queue",
        "64",
        *args,
        *cache_set,
        cwd=ROOT,
        env={"OMP_NUM_THREADS": "1"},
        stderr=subprocess.DEVNULL,
        timeout=300,
    )


def message(sample) -> list:
    audio = base64.b64encode(Path(sample.audio).read_bytes()).decode()
    text = sample.question + "\n" + "\n".join(f"({chr(65 + i)}) {c}" for i, c in enumerate(sample.choices))
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}},
                {"type": "text", "text": text},
            ],
        }
    ]


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def load(url: str, bodies: list, clients: int) -> dict:
    import httpx

    def one(body):
        started = time.perf_counter()
        reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
        return time.perf_counter() - started, reply

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, bodies))
    wall = time.perf_counter() - started
    ok = [(s, r.json()) for s, r in results if r.status_code == 200]
    stages = {k: [reply["autagent"]["seconds"].get(k, 0.0) for _, reply in ok] for k in ("select", "tools", "upstream")}
    return {
        "rps": len(ok) / wall,
        "ok": len(ok),
        "refused": len(results) - len(ok),
        "total": [s for s, _ in ok],
        **stages,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin", default="runs/embedded_main/plugin")
    parser.add_argument("--data", default="data/embedded/test.json")
    parser.add_argument("--requests", type=int, default=48)
    args = parser.parse_args()

    import httpx

    from autagent import Plugin
    from autagent.data.loaders import load_dataset

    if not (Path(args.plugin) / "manifest.json").exists():
        sys.exit(f"{args.plugin}: no plugin there (run `make train` first)")
    samples = load_dataset(args.data)[: args.requests]
    cache = Path(tempfile.mkdtemp(prefix="autagent-bench-serve-"))
    upstream, upstream_url = start("--reasoner", "embedded", cache=cache)
    front, front_url = start("--plugin", args.plugin, "--upstream", upstream_url + "/v1", cache=cache)
    try:
        bodies = [{"model": "embedded", "messages": message(s)} for s in samples]
        load(front_url, bodies, 4)  # warm: tools computed and cached, answers cached, models loaded
        print(f"plugin service under load ({len(bodies)} requests, embedded reasoner upstream, tools cached):")
        print(
            f"{'clients':>8} {'req/s':>7} {'p50 ms':>8} {'p90 ms':>8} {'select p50':>11} {'tools p50':>10} "
            f"{'upstream p50':>13} {'refused':>8}"
        )
        for clients in (1, 8, 32):
            r = load(front_url, bodies, clients)
            print(
                f"{clients:8d} {r['rps']:7.1f} {1000 * percentile(r['total'], 0.5):8.1f} "
                f"{1000 * percentile(r['total'], 0.9):8.1f} {1000 * percentile(r['select'], 0.5):11.1f} "
                f"{1000 * percentile(r['tools'], 0.5):10.1f} {1000 * percentile(r['upstream'], 0.5):13.1f} "
                f"{r['refused']:8d}"
            )
        plugin = Plugin.load(args.plugin, audio_dir=cache / "audio")
        differences = []
        for body in bodies:
            direct_body = {**body, "messages": plugin.augment(body["messages"])}
            started = time.perf_counter()
            httpx.post(upstream_url + "/v1/chat/completions", json=direct_body, timeout=600)
            direct = time.perf_counter() - started
            started = time.perf_counter()
            httpx.post(front_url + "/v1/chat/completions", json=body, timeout=600)
            differences.append(time.perf_counter() - started - direct)
        print(
            f"service overhead per request (through the plugin service minus the same forwarded request sent "
            f"straight to the upstream, tools cached): median {1000 * statistics.median(differences):.1f} ms, "
            f"p90 {1000 * percentile(differences, 0.9):.1f} ms ({len(differences)} requests)"
        )
    finally:
        for process in (front, upstream):
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()

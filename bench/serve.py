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

With ``--baseline DIR`` (a checkout of another commit, e.g. ``git worktree add /tmp/base 4d19cae``)
the plugin service of that checkout is measured in the same run, on the same upstream, and the
ratios (this tree / baseline) are printed: the hardening's cost in throughput and overhead.  Without
a trained plugin, ``--plugin synthetic`` makes a router plugin that always calls asr and tempo.

Usage: .venv/bin/python bench/serve.py [--plugin runs/embedded_main/plugin] [--requests 48] [--baseline DIR]
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


def start(*args: str, cache: Path, root: Path = ROOT) -> tuple[subprocess.Popen, str]:
    """``autagent serve`` of the checkout at ``root`` (its own code: PYTHONPATH and cwd)."""
    from autagent.serve import spawn

    cache_set = ["--set", f"answer_cache_dir={cache / 'answers'}", "--set", f"tools.cache_dir={cache / 'tools'}"]
    return spawn(
        "--max-queue",
        "64",
        *args,
        *cache_set,
        cwd=root,
        env={"OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)},
        stderr=subprocess.DEVNULL,
        timeout=300,
    )


def synthetic_plugin(folder: Path) -> Path:
    """A router plugin that always calls asr and tempo (the tests' stand-in for a trained one)."""
    import torch

    from autagent.policies.router.features import Featurizer
    from autagent.policies.router.model import Router, RouterConfig
    from autagent.policies.router.plugin import export_router

    tools = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")
    torch.manual_seed(0)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(), len(tools))
    with torch.no_grad():
        router.net[-1].bias.copy_(torch.tensor([3.0, -3.0, -3.0, 3.0, -3.0, -3.0]))
    return export_router(folder, router, featurizer, tools, "embedded", {}, 30.0, {"name": "bench"})


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


def measure(fronts: dict, upstream_url: str, bodies: list, plugin, rounds: int = 2) -> dict:
    """Throughput and latency at 1, 8 and 32 clients, and the overhead per request, of each service in
    ``fronts`` (name -> URL), interleaved (A, B, A, B... at each level; each request's overhead against
    the same direct request) so that what else the machine runs weighs on them alike."""
    import httpx

    for url in fronts.values():
        load(url, bodies, 4)  # warm: tools computed and cached, answers cached, models loaded
    results = {name: {"rows": {}, "overhead": []} for name in fronts}
    for clients in (1, 8, 32):
        runs = {name: [] for name in fronts}
        for _ in range(rounds):
            for name, url in fronts.items():
                runs[name].append(load(url, bodies, clients))
        for name, measured in runs.items():
            merged = {k: sum((m[k] for m in measured), []) for k in ("total", "select", "tools", "upstream")}
            rps = statistics.mean(m["rps"] for m in measured)
            results[name]["rows"][clients] = merged | {"rps": rps, "refused": sum(m["refused"] for m in measured)}
    for body in bodies:
        direct_body = {**body, "messages": plugin.augment(body["messages"])}
        started = time.perf_counter()
        httpx.post(upstream_url + "/v1/chat/completions", json=direct_body, timeout=600)
        direct = time.perf_counter() - started
        for name, url in fronts.items():
            started = time.perf_counter()
            httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
            results[name]["overhead"].append(time.perf_counter() - started - direct)
    return results


def report(name: str, result: dict) -> None:
    print(f"{name}:")
    print(
        f"{'clients':>8} {'req/s':>7} {'p50 ms':>8} {'p90 ms':>8} {'select p50':>11} {'tools p50':>10} "
        f"{'upstream p50':>13} {'refused':>8}"
    )
    for clients, r in result["rows"].items():
        print(
            f"{clients:8d} {r['rps']:7.1f} {1000 * percentile(r['total'], 0.5):8.1f} "
            f"{1000 * percentile(r['total'], 0.9):8.1f} {1000 * percentile(r['select'], 0.5):11.1f} "
            f"{1000 * percentile(r['tools'], 0.5):10.1f} {1000 * percentile(r['upstream'], 0.5):13.1f} "
            f"{r['refused']:8d}"
        )
    d = result["overhead"]
    print(
        f"service overhead per request (through the plugin service minus the same forwarded request sent "
        f"straight to the upstream, tools cached): median {1000 * statistics.median(d):.1f} ms, "
        f"p90 {1000 * percentile(d, 0.9):.1f} ms ({len(d)} requests)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin", default="runs/embedded_main/plugin", help="a plugin folder, or 'synthetic'")
    parser.add_argument("--data", default="data/embedded/test.json")
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--baseline", help="a checkout of another commit, measured in the same run")
    args = parser.parse_args()

    from autagent import Plugin
    from autagent.data.loaders import load_dataset

    cache = Path(tempfile.mkdtemp(prefix="autagent-bench-serve-"))
    if args.plugin == "synthetic":
        args.plugin = str(synthetic_plugin(cache / "plugin"))
    if not (Path(args.plugin) / "manifest.json").exists():
        sys.exit(f"{args.plugin}: no plugin there (run `make train` first, or --plugin synthetic)")
    samples = load_dataset(args.data)[: args.requests]
    upstream, upstream_url = start("--reasoner", "embedded", cache=cache)
    fronts = {"this tree": ROOT} | ({f"baseline {args.baseline}": Path(args.baseline)} if args.baseline else {})
    plugin = Plugin.load(args.plugin, audio_dir=cache / "audio")
    bodies = [{"model": "embedded", "messages": message(s)} for s in samples]
    started = []
    try:
        print(f"plugin service under load ({len(bodies)} requests, embedded reasoner upstream, tools cached):")
        urls = {}
        for name, root in fronts.items():
            started.append(
                start(
                    "--plugin",
                    args.plugin,
                    "--upstream",
                    upstream_url + "/v1",
                    cache=cache / name.split()[0],
                    root=root,
                )
            )
            urls[name] = started[-1][1]
        results = measure(urls, upstream_url, bodies, plugin)
        for name, result in results.items():
            report(name, result)
    finally:
        for process, _ in [*started, (upstream, upstream_url)]:
            process.terminate()
            process.wait(timeout=30)
    if len(results) == 2:
        ours, base = results.values()
        ratios = [f"{c} clients {ours['rows'][c]['rps'] / base['rows'][c]['rps']:.2f}" for c in ours["rows"]]
        overhead = statistics.median(ours["overhead"]) - statistics.median(base["overhead"])
        print(
            f"this tree / baseline, requests per second: {', '.join(ratios)}; median overhead {1000 * overhead:+.1f} ms"
        )


if __name__ == "__main__":
    main()

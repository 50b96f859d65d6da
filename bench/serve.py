#!/usr/bin/env python
"""The plugin service under load (prints figures; not a test).

Starts ``autagent serve --reasoner embedded`` (the upstream) and, in front of it, ``autagent serve
--plugin P --upstream ...``, both on loopback ports, and sends the embedded benchmark's test questions
as OpenAI chat requests (the clip as ``input_audio``):

* at 1, 8 and 32 concurrent clients: requests per second, and p50 / p90 latency of the whole request
  and of each stage the service reports (selection, tools, upstream);
* the service's own overhead: each request sent through the plugin service, against the very
  messages it forwards (records included) sent straight to the upstream, tools already cached
  (median and p90 of the per-request differences, ms, with the median's 95 % interval), and the CPU
  time the service's process spent per request (from ``/proc/<pid>/stat``: steadier than wall time
  on a busy machine).  The clips repeat, as a conversation sends its clip with every turn.

The baseline (``--baseline``: a checkout's folder, or a commit, archived into a temporary folder and
removed afterwards; default :data:`BEFORE`, the commit before the service's own cost was cut;
``none``: this tree alone) is measured in the same run, on the same upstream, interleaved with this
tree (the order rotating request by request), and the ratios (this tree / baseline) are printed.
Without a trained plugin, ``--plugin synthetic`` makes a router plugin that always calls asr and tempo.

Usage: .venv/bin/python bench/serve.py [--plugin runs/embedded_main/plugin] [--requests 48] [--overhead 480]
       [--baseline DIR|COMMIT|none] [--clients 1,8,32]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BEFORE = "2d6b8a1"
"""The default baseline: the commit before the service's own cost per request was cut (issue 45)."""


def start(*args: str, cache: Path, root: Path = ROOT) -> tuple[subprocess.Popen, str]:
    """``autagent serve`` of the checkout at ``root`` (its own code: PYTHONPATH and cwd)."""
    from autagent.testing.serve import spawn

    cache_set = ["--set", f"answer_cache_dir={cache / 'answers'}", "--set", f"tools.cache_dir={cache / 'tools'}"]
    return spawn(
        "--max-queue",
        "64",
        *args,
        *cache_set,
        cwd=root,
        env={"OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)},
        timeout=300,  # its stderr in a temporary file: quoted when it exits before answering
    )


def synthetic_plugin(folder: Path) -> Path:
    """A router plugin that always calls asr and tempo (the tests' stand-in for a trained one)."""
    import torch

    from autagent.plugin.manifest import PluginTarget
    from autagent.policies.router.export import RouterParts, export_router
    from autagent.policies.router.features import Featurizer
    from autagent.policies.router.model import Router, RouterConfig

    tools = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")
    torch.manual_seed(0)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(), len(tools))
    with torch.no_grad():
        router.net[-1].bias.copy_(torch.tensor([3.0, -3.0, -3.0, 3.0, -3.0, -3.0]))
    return export_router(
        PluginTarget(folder, tools, "embedded", {}, 30.0, {"name": "bench"}), RouterParts(router, featurizer)
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


def measure(
    fronts: dict, upstream: tuple, bodies: list, plugin, levels, rounds: int, overhead: int, forward=None
) -> dict:
    """Throughput and latency at each level of concurrent clients, and the overhead per request, of each
    service in ``fronts`` (name -> (URL, pid)) in front of ``upstream`` (URL, pid), interleaved so that
    what else the machine runs weighs on them alike: A, B, A, B... at each level; for the overhead,
    the direct request and each service's in an order that rotates request by request.  ``forward``:
    the messages the services send upstream for a request's (default: the plugin's records added)."""
    for url, _ in fronts.values():
        load(url, bodies, 4)  # warm: tools computed and cached, answers cached, models loaded
    results = {name: {"rows": {}, "overhead": []} for name in fronts}
    for clients in levels:
        runs = {name: [] for name in fronts}
        for _ in range(rounds):
            for name, (url, _) in fronts.items():
                runs[name].append(load(url, bodies, clients))
        for name, measured in runs.items():
            merged = {k: sum((m[k] for m in measured), []) for k in ("total", "select", "tools", "upstream")}
            rps = statistics.mean(m["rps"] for m in measured)
            results[name]["rows"][clients] = merged | {"rps": rps, "refused": sum(m["refused"] for m in measured)}
    for name, cpu in overheads(fronts, upstream, bodies, forward or plugin.augment, overhead).items():
        results[name] |= cpu
    return results


def overheads(fronts: dict, upstream: tuple, bodies: list, forward, requests: int) -> dict:
    """Per service: ``overhead`` (seconds, per request: through it minus straight to the upstream, the
    same request at the same moment), ``cpu`` (its process's CPU seconds per request) and
    ``upstream_cpu`` (the upstream's, per request it answers)."""
    import httpx

    headers = {"Content-Type": "application/json"}
    encoded = [json.dumps(body).encode() for body in bodies]
    direct = [json.dumps({**body, "messages": forward(body["messages"])}).encode() for body in bodies]
    upstream_url, upstream_pid = upstream
    targets = {None: upstream_url} | {name: url for name, (url, _) in fronts.items()}
    clients = {name: httpx.Client(base_url=url, timeout=600) for name, url in targets.items()}
    for name, client in clients.items():  # connections open, both paths warm
        for i in range(len(bodies)):
            client.post("/v1/chat/completions", content=(direct if name is None else encoded)[i], headers=headers)
    pids = {name: pid for name, (_, pid) in fronts.items()}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()} | {None: cpu_seconds(upstream_pid)}
    seconds = {name: [] for name in fronts}
    order = list(targets)
    for i in range(requests):
        k = i % len(bodies)
        took = {}
        for name in order[i % len(order) :] + order[: i % len(order)]:
            started = time.perf_counter()
            reply = clients[name].post(
                "/v1/chat/completions", content=(direct if name is None else encoded)[k], headers=headers
            )
            took[name] = time.perf_counter() - started
            if reply.status_code != 200:
                raise RuntimeError(f"{name or 'the upstream'} answered {reply.status_code}: {reply.text[:200]}")
        for name in fronts:
            seconds[name].append(took[name] - took[None])
    after = {name: cpu_seconds(pid) for name, pid in pids.items()} | {None: cpu_seconds(upstream_pid)}
    for client in clients.values():
        client.close()
    upstream_cpu = per_request(before[None], after[None], requests * len(targets))
    return {
        name: {
            "overhead": seconds[name],
            "cpu": per_request(before[name], after[name], requests),
            "upstream_cpu": upstream_cpu,
        }
        for name in fronts
    }


def cpu_seconds(pid: int | None) -> float | None:
    """User and system CPU seconds of process ``pid`` so far (Linux; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def per_request(before, after, requests: float) -> float | None:
    return None if before is None or after is None else (after - before) / requests


def median_interval(values) -> tuple[float, float]:
    """The median's 95 % interval from order statistics (no assumption on the distribution)."""
    values, n = sorted(values), len(values)
    half = 1.96 * math.sqrt(n) / 2
    return values[max(0, math.floor(n / 2 - half) - 1)], values[min(n - 1, math.ceil(n / 2 + half))]


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
    d, cpu = result["overhead"], result["cpu"]
    low, high = median_interval(d)
    cpu_text = "" if cpu is None else f"; its process's CPU {1000 * cpu:.2f} ms per request"
    print(
        f"service overhead per request (through the plugin service minus the same forwarded request sent "
        f"straight to the upstream, tools cached): median {1000 * statistics.median(d):.1f} ms "
        f"(95 % interval {1000 * low:.1f} to {1000 * high:.1f}), p90 {1000 * percentile(d, 0.9):.1f} ms "
        f"({len(d)} requests){cpu_text}"
    )


def baseline_checkout(baseline: str, folder: Path) -> Path | None:
    """``baseline`` as a folder to run: itself when it is one, else that commit of this repository
    archived into ``folder`` (None, with a note, when this clone does not have it)."""
    if Path(baseline).is_dir():
        return Path(baseline)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", baseline], capture_output=True)
    if archive.returncode != 0:
        print(f"baseline {baseline}: not in this clone ({archive.stderr.decode().strip()[:200]}); this tree alone")
        return None
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def ratios(ours: dict, base: dict) -> None:
    rps = ", ".join(f"{c} clients {ours['rows'][c]['rps'] / base['rows'][c]['rps']:.2f}" for c in ours["rows"])
    print(f"this tree / baseline, requests per second: {rps}")
    for label, q in (("median", 0.5), ("p90", 0.9)):
        a, b = percentile(ours["overhead"], q), percentile(base["overhead"], q)
        print(f"this tree / baseline, overhead {label}: {1000 * a:.1f} / {1000 * b:.1f} ms = {a / b:.2f}")
    if ours["cpu"] is not None and base["cpu"] is not None:
        a, b = ours["cpu"], base["cpu"]
        print(f"this tree / baseline, the service's CPU per request: {1000 * a:.2f} / {1000 * b:.2f} ms = {a / b:.2f}")


def summary(result: dict) -> dict:
    """One tree's figures as a JSON record keeps them (seconds)."""
    d = result["overhead"]
    low, high = median_interval(d)
    rows = {
        str(clients): {
            "requests_per_s": round(r["rps"], 3),
            "p50_s": round(percentile(r["total"], 0.5), 5),
            "p90_s": round(percentile(r["total"], 0.9), 5),
            "refused": r["refused"],
        }
        for clients, r in result["rows"].items()
    }
    overhead = {"median_s": statistics.median(d), "median_95_interval_s": [low, high], "p90_s": percentile(d, 0.9)}
    return {"rows": rows, "overhead": overhead | {"requests": len(d)}, "cpu_per_request_s": result["cpu"]}


def record(path: str, args, results: dict) -> None:
    """The run's figures, the commits and the machine's load, as JSON in ``path``."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    out = {
        "command": "bench/serve.py " + " ".join(sys.argv[1:]),
        "this_tree": head.stdout.strip(),
        "baseline": args.baseline,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cores": os.cpu_count(),
        "load_average_after": os.getloadavg(),
        "results": {name: summary(result) for name, result in results.items()},
    }
    Path(path).write_text(json.dumps(out, indent=1) + "\n")
    print(f"figures written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin", default="runs/embedded_main/plugin", help="a plugin folder, or 'synthetic'")
    parser.add_argument("--data", default="data/embedded/test.json")
    parser.add_argument("--requests", type=int, default=48, help="test questions sent at each level of clients")
    parser.add_argument("--overhead", type=int, default=480, help="requests whose overhead is measured")
    parser.add_argument("--clients", default="1,8,32", help="levels of concurrent clients")
    parser.add_argument("--rounds", type=int, default=2, help="runs of the questions at each level")
    parser.add_argument(
        "--baseline",
        default=BEFORE,
        help=f"a checkout's folder or a commit measured in the same run (default {BEFORE}); 'none': this tree alone",
    )
    parser.add_argument("--out", metavar="FILE", help="also write the figures as a JSON record here")
    args = parser.parse_args()

    from autagent import Plugin
    from autagent.data.loaders import load_dataset

    cache = Path(tempfile.mkdtemp(prefix="autagent-bench-serve-"))
    try:
        run(args, cache, Plugin, load_dataset)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def run(args, cache: Path, Plugin, load_dataset) -> None:  # noqa: N803 - the class, imported late
    if args.plugin == "synthetic":
        args.plugin = str(synthetic_plugin(cache / "plugin"))
    if not (Path(args.plugin) / "manifest.json").exists():
        sys.exit(f"{args.plugin}: no plugin there (run `make train` first, or --plugin synthetic)")
    base = None if args.baseline == "none" else baseline_checkout(args.baseline, cache / "baseline")
    samples = load_dataset(args.data)[: args.requests]
    upstream, upstream_url = start("--reasoner", "embedded", cache=cache)
    fronts = {"this tree": ROOT} | ({f"baseline {args.baseline}": base} if base else {})
    plugin = Plugin.load(args.plugin, audio_dir=cache / "audio")
    bodies = [{"model": "embedded", "messages": message(s)} for s in samples]
    levels = [int(c) for c in args.clients.split(",") if c]
    started = []
    try:
        print(
            f"plugin service under load ({len(bodies)} requests, embedded reasoner upstream, tools cached; "
            f"overhead over {args.overhead} requests):"
        )
        urls = {}
        for name, root in fronts.items():
            folder = cache / name.split()[0]
            started.append(start("--plugin", args.plugin, "--upstream", upstream_url + "/v1", cache=folder, root=root))
            urls[name] = (started[-1][1], started[-1][0].pid)
        results = measure(urls, (upstream_url, upstream.pid), bodies, plugin, levels, args.rounds, args.overhead)
        for name, result in results.items():
            report(name, result)
    finally:
        for process, _ in [*started, (upstream, upstream_url)]:
            process.terminate()
            process.wait(timeout=30)
    ours = results["this tree"]
    if ours["upstream_cpu"] is not None:
        print(f"the upstream's CPU per request: {1000 * ours['upstream_cpu']:.2f} ms")
    if len(results) == 2:
        ratios(*results.values())
    if args.out:
        record(args.out, args, results)


if __name__ == "__main__":
    main()

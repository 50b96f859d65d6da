#!/usr/bin/env python
"""How much sooner ``/v1/realtime`` answers after the audio ends than the clip posted whole (prints
figures; not a test).

Two ``autagent serve --plugin P --reasoner embedded`` services on loopback ports, each with an empty
tool cache and answer cache of its own.  Held-out clips of ``--min-seconds`` or more (the embedded
benchmark's test split), as 24 kHz 16-bit audio:

* **streamed**: ``session.update``, the question, then the clip in 100 ms chunks at real time to one
  service's ``/v1/realtime``; after the last chunk, ``input_audio_buffer.commit`` and
  ``response.create``: the **wait** is from the last chunk to ``response.done``;
* **whole**: the same samples as a WAV posted to the other's ``/v1/chat/completions`` (what a client
  does once the user has stopped): the **latency** is the request's.

Per clip and as median / p90: the wait, the whole-clip latency, their ratio, whether the answers and
tools agree, and the stages (selection, tools, reasoner) each path reports; after the commit for the
stream.  Goal (issue 35): median wait <= 50 % of the whole-clip latency, with the same answers.

Usage: .venv/bin/python bench/stream.py [--plugin runs/embedded_main/plugin] [--clips 12]
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RATE, CHUNK_S = 24000, 0.1


def start(plugin: str, cache: Path):
    from autagent.testing.serve import spawn

    settings = ["--set", f"answer_cache_dir={cache / 'answers'}", "--set", f"tools.cache_dir={cache / 'tools'}"]
    return spawn(
        "--plugin",
        plugin,
        "--reasoner",
        "embedded",
        *settings,
        "--audio-dir",
        str(cache / "audio"),
        "--warm-up",
        cwd=ROOT,
        env={"OMP_NUM_THREADS": "1"},
        stderr=subprocess.DEVNULL,
        timeout=600,
    )


def as_24k(sample, folder: Path) -> tuple[np.ndarray, Path]:
    from tools.arriving import wav_bytes
    from tools.audio import load_audio

    pcm = np.round(np.clip(load_audio(sample.audio, RATE).samples, -1, 1) * 32767).astype(np.int16)
    path = folder / f"{sample.id}.wav"
    path.write_bytes(wav_bytes(pcm, RATE))
    return pcm, path


def text_of(sample) -> str:
    return sample.question + "\n" + "\n".join(f"({chr(65 + i)}) {c}" for i, c in enumerate(sample.choices))


def whole(url: str, sample, path: Path) -> dict:
    import httpx

    data = base64.b64encode(path.read_bytes()).decode()
    content = [
        {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
        {"type": "text", "text": text_of(sample)},
    ]
    started = time.perf_counter()
    reply = httpx.post(
        url + "/v1/chat/completions",
        json={"model": "embedded", "messages": [{"role": "user", "content": content}]},
        timeout=600,
    ).json()
    seconds = time.perf_counter() - started
    info = reply["autagent"]["seconds"]
    return {
        "latency": seconds,
        "answer": reply["choices"][0]["message"]["content"],
        "tools": reply["autagent"]["tools"],
        "select": info.get("select", 0.0),
        "tools_s": info.get("tools", 0.0),
        "reasoner": info.get("upstream", 0.0),
    }


def streamed(url: str, sample, pcm: np.ndarray) -> dict:
    from websockets.sync.client import connect

    socket = connect(url.replace("http://", "ws://") + "/v1/realtime?model=embedded", max_size=None).__enter__()
    send = lambda kind, **fields: socket.send(json.dumps({"type": kind, **fields}))  # noqa: E731
    socket.recv()
    send("session.update", session={"type": "realtime", "output_modalities": ["text"]})
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text_of(sample)}]}
    send("conversation.item.create", item=item)
    step = int(CHUNK_S * RATE)
    begun = time.perf_counter()
    for k, start_at in enumerate(range(0, len(pcm), step)):  # at real time: chunk k goes out at k * 100 ms
        time.sleep(max(0.0, begun + k * CHUNK_S - time.perf_counter()))
        send("input_audio_buffer.append", audio=base64.b64encode(pcm[start_at : start_at + step].tobytes()).decode())
    last_chunk = time.perf_counter()
    send("input_audio_buffer.commit")
    send("response.create")
    while True:
        event = json.loads(socket.recv(timeout=600))
        if event["type"] == "error":
            raise RuntimeError(f"{sample.id}: {event['error']['message']}")
        if event["type"] == "response.done":
            break
    wait = time.perf_counter() - last_chunk
    socket.close()
    response = event["response"]
    info = response["autagent"]
    return {
        "wait": wait,
        "answer": response["output"][0]["content"][0]["text"],
        "tools": info["tools"],
        "select": info["seconds"].get("select_after_commit", 0.0),
        "tools_s": info["seconds"].get("tools_after_commit", 0.0),
        "reasoner": info["seconds"].get("upstream", 0.0),
        "share": info["tools_before_commit_share"],
        "seconds": info["seconds"],
    }


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin", default="runs/embedded_main/plugin")
    parser.add_argument("--data", default="data/embedded/test.json")
    parser.add_argument("--clips", type=int, default=12)
    parser.add_argument("--min-seconds", type=float, default=5.0)
    args = parser.parse_args()

    import soundfile as sf

    from autagent.data.loaders import load_dataset

    if not (Path(args.plugin) / "manifest.json").exists():
        sys.exit(f"{args.plugin}: no plugin there (run `make train` first)")
    long_enough = [s for s in load_dataset(args.data) if sf.info(s.audio).duration >= args.min_seconds]
    warm, samples = long_enough[:3], long_enough[3 : 3 + args.clips]
    work = Path(tempfile.mkdtemp(prefix="autagent-bench-stream-"))
    services = {}
    try:
        for name in ("whole", "stream"):
            services[name] = start(args.plugin, work / name)
        clips = {s.id: as_24k(s, work) for s in warm + samples}
        for sample in warm:  # models loaded and compiled on clips not measured (their records are cached apart)
            whole(services["whole"][1], sample, clips[sample.id][1])
            streamed(services["stream"][1], sample, clips[sample.id][0][: 2 * RATE])
        rows = []
        print(
            f"streamed at real time in {1000 * CHUNK_S:.0f} ms chunks vs posted whole ({len(samples)} held-out clips):"
        )
        print(f"{'clip':>11} {'s':>5} {'tools':>22} {'wait ms':>8} {'whole ms':>9} {'ratio':>6} {'same':>5}")
        for sample in samples:
            pcm, path = clips[sample.id]
            s = streamed(services["stream"][1], sample, pcm)
            w = whole(services["whole"][1], sample, path)
            same = s["answer"] == w["answer"] and s["tools"] == w["tools"]
            rows.append((sample, s, w, same))
            print(
                f"{sample.id:>11} {len(pcm) / RATE:5.1f} {','.join(w['tools']) or '-':>22} {1000 * s['wait']:8.0f} "
                f"{1000 * w['latency']:9.0f} {s['wait'] / w['latency']:6.2f} {'yes' if same else 'NO':>5}"
            )
        waits, latencies = [r[1]["wait"] for r in rows], [r[2]["latency"] for r in rows]
        print(
            f"median wait {1000 * statistics.median(waits):.0f} ms (p90 {1000 * percentile(waits, 0.9):.0f}) vs whole "
            f"{1000 * statistics.median(latencies):.0f} ms (p90 {1000 * percentile(latencies, 0.9):.0f}): ratio of "
            f"medians {statistics.median(waits) / statistics.median(latencies):.2f}, median of ratios "
            f"{statistics.median(a / b for a, b in zip(waits, latencies)):.2f}; same answers and tools "
            f"{sum(r[3] for r in rows)}/{len(rows)}"
        )
        for label, key in (("select", "select"), ("tools", "tools_s"), ("reasoner", "reasoner")):
            print(
                f"  {label:>8} median ms: after the commit {1000 * statistics.median(r[1][key] for r in rows):7.1f}   "
                f"whole {1000 * statistics.median(r[2][key] for r in rows):7.1f}"
            )
        print(f"  tools' work done before the commit: median {statistics.median(r[1]['share'] for r in rows):.0%}")
    finally:
        for process, _ in services.values():
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()

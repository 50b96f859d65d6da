#!/usr/bin/env python
"""Tool benchmark (prints figures; not a test).  Everything is measured in this one run:

* per tool: clips per second one at a time and in batches (``ToolRunner.run_batch``), on the
  embedded benchmark's clips;
* the embedded ASR's word error rate on espeak-ng sentences with known text;
* the whole library over a dataset: today's seven tools through the Ray pool (batched, two ASR
  actors) against the six paper tools run one clip and one tool at a time in one process, as seconds
  per clip and their ratio;
* the cost of a cache hit.

Usage: .venv/bin/python bench/tools.py [--clips N] [--data data/embedded/test.json]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

SEVEN = ["asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers"]
SENTENCES = (
    "The quick brown fox jumps over the lazy dog",
    "Please call me back when you get this message",
    "The meeting has been moved to Thursday afternoon",
    "Could you turn the lights off in the hall",
    "We will need more paper for the printer",
    "Nobody expected the river to rise so fast",
)


def wer(reference: str, hypothesis: str) -> tuple[int, int]:
    ref, hyp = re.findall(r"[a-z']+", reference.lower()), re.findall(r"[a-z']+", hypothesis.lower())
    d = np.arange(len(hyp) + 1)
    for i, r in enumerate(ref, 1):
        prev, d[0] = d.copy(), i
        for j, h in enumerate(hyp, 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (r != h))
    return int(d[-1]), len(ref)


def benchmark_clips(data: str, count: int, folder: Path) -> list[str]:
    """Clips of the embedded benchmark (generated small if ``data`` is absent)."""
    from autagent.data.loaders import load_dataset

    if not Path(data).exists():
        from autagent.data.generator import EmbeddedBenchmarkConfig, generate

        data = str(
            generate(EmbeddedBenchmarkConfig(root=str(folder / "bench"), sizes={"test": count}), progress=False)["test"]
        )
    return [s.audio for s in load_dataset(data)[:count]]


def seconds_per_clip(runner, tool: str, clips: list[str], records: list | None = None) -> list[float]:
    """Seconds of ``tool`` on each clip, one clip at a time through ``runner`` (no cache: computed fresh); the
    caller loads the model first so a load is not counted.  The records go to ``records`` when given (to count
    error records).  Shared with scripts/tool_seconds.py."""
    seconds = []
    for clip in clips:
        started = time.perf_counter()
        record = runner.run(tool, clip)
        seconds.append(time.perf_counter() - started)
        if records is not None:
            records.append(record)
    return seconds


def asr_vad(clips: list[str]) -> None:
    """The ASR with its VAD (the default since revision 4) against without, in turn on each clip of
    one run: the ratio of their seconds, and how many records stayed the same."""
    from tools import ToolRunner

    runners = {vad: ToolRunner("embedded", {"asr": {"vad_filter": vad}}) for vad in (False, True)}
    seconds, outputs = {False: 0.0, True: 0.0}, {False: [], True: []}
    for runner in runners.values():
        runner.run("asr", clips[0])  # load the model
    for clip in clips:
        for vad, runner in runners.items():
            started = time.perf_counter()
            outputs[vad].append(runner.run("asr", clip)["output"])
            seconds[vad] += time.perf_counter() - started
    same = sum(a == b for a, b in zip(outputs[False], outputs[True]))
    print(
        f"embedded ASR with VAD: {seconds[True] / len(clips):.3f} s per clip against {seconds[False] / len(clips):.3f} "
        f"without ({seconds[False] / seconds[True]:.2f}x); the same record on {same} of {len(clips)} clips"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=48)
    parser.add_argument("--data", default="data/embedded/test.json")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="autagent-bench-"))

    import soundfile

    from autagent.data import synth
    from tools import PAPER_TOOLS, ToolRunner
    from tools.pool import PoolConfig, ToolPool

    clips = benchmark_clips(args.data, args.clips, folder)
    infos = [soundfile.info(c) for c in clips]
    seconds = sum(info.frames / info.samplerate for info in infos)
    print(f"{len(clips)} clips of the embedded benchmark, {seconds / len(clips):.1f} s on average")
    runner = ToolRunner("embedded")
    one, batched = {}, {}
    print("per tool, clips per second:     one at a time   batched (8)   speed-up")
    for tool in SEVEN:
        runner.run_batch(tool, clips[:2])  # load the model
        one[tool] = sum(seconds_per_clip(runner, tool, clips))
        started = time.perf_counter()
        for k in range(0, len(clips), 8):
            runner.run_batch(tool, clips[k : k + 8])
        batched[tool] = time.perf_counter() - started
        print(
            f"  {tool:13s} {len(clips) / one[tool]:24.1f} {len(clips) / batched[tool]:13.1f} "
            f"{one[tool] / batched[tool]:9.2f}x"
        )

    speech = []
    for k, sentence in enumerate(SENTENCES):
        path = folder / f"speech{k}.wav"
        synth.write_wav(
            path, synth.normalise(synth.speech(sentence, voice=["en-us", "en-gb", "en-us+m3"][k % 3], rate=150))
        )
        speech.append(str(path))
    outputs = [runner.run("asr", p)["output"]["text"] for p in speech]
    errors, words = map(sum, zip(*(wer(s, o) for s, o in zip(SENTENCES, outputs))))
    print(f"embedded ASR word error rate: {100 * errors / words:.1f} % ({errors}/{words} words)")
    asr_vad(clips)

    old = sum(one[t] for t in PAPER_TOOLS) / len(clips)
    pool = ToolPool(
        PoolConfig(
            executor="ray", cache_dir=str(folder / "cache"), enabled=SEVEN, replicas={"asr": 2}, batch_size={"asr": 12}
        )
    )
    pool.run_many(clips[:1], SEVEN)  # start the actors and load their models
    import ray

    ray.get([pool.actor("asr", k).run_batch.remote(clips[:1]) for k in range(2)])
    started = time.perf_counter()
    pool.run_many(clips[1:], SEVEN)
    new = (time.perf_counter() - started) / (len(clips) - 1)
    print(f"six paper tools, one clip and one tool at a time in one process: {old:.3f} s per clip")
    print(
        f"seven tools on the Ray pool, batched (2 ASR actors, {os.cpu_count()} cores): {new:.3f} s per clip "
        f"= {new / old:.2f} of the old cost"
    )
    hits = []
    for clip in clips[1:9]:
        started = time.perf_counter()
        pool.run(clip, SEVEN)
        hits.append((time.perf_counter() - started) / len(SEVEN))
    print(f"cache hit: {1000 * statistics.median(hits):.2f} ms per record (hash of the clip + JSON read)")
    pool.shutdown()


if __name__ == "__main__":
    main()

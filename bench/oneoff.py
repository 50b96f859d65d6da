#!/usr/bin/env python
"""One-off use: what ``autagent select`` costs cold (a fresh process: Python, imports, the plugin's
encoders, the first clip) and warm (each further clip in the same process, as ``select --batch`` runs
them), measured in one run (prints figures; not a test).

Cold: ``autagent select`` run ``--runs`` times as a new process (the operating system's file cache
warm after the first), its wall time, and the plugin load it reports on stderr.  Warm: in this
process, the plugin loaded once, then each of ``--clips`` clips selected one at a time, and the same
clips as one ``select_many`` batch.

Usage: .venv/bin/python bench/oneoff.py --plugin runs/embedded_main/plugin --audio-dir data/embedded/audio/test
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
QUESTION, CHOICES = "How fast is it?", ["90 BPM", "120 BPM"]


def cold(plugin: str, clip: str, runs: int) -> list[tuple[float, float]]:
    """(wall seconds, plugin load seconds) of ``autagent select`` as a fresh process, ``runs`` times."""
    command = [str(ROOT / ".venv/bin/autagent"), "select", "--plugin", plugin, "--audio", clip]
    command += ["--question", QUESTION, "--choices", *CHOICES]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
        wall = time.perf_counter() - started
        loaded = re.search(r"loading the plugin .*? ([\d.]+) s", done.stderr)
        out.append((wall, float(loaded.group(1)) if loaded else float("nan")))
    return out


def warm(plugin: str, clips: list[str], others: list[str]) -> dict:
    """Import, load, the first clip, then each of ``clips`` alone, and ``others`` (clips not seen yet, so
    no audio profile is memoised) as one batch, in this process."""
    started = time.perf_counter()
    from autagent.api import load
    from autagent.data.sample import Sample

    imported = time.perf_counter() - started
    started = time.perf_counter()
    selector = load(plugin)
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    selector.select(clips[0], QUESTION, CHOICES)
    first = time.perf_counter() - started
    each = []
    for clip in clips[1:]:
        started = time.perf_counter()
        selector.select(clip, QUESTION, CHOICES)
        each.append(time.perf_counter() - started)
    samples = [
        Sample(id=str(i), audio=c, question=QUESTION, choices=tuple(CHOICES), answer="") for i, c in enumerate(others)
    ]
    started = time.perf_counter()
    selector.select_many(samples)
    batch = time.perf_counter() - started
    return {"import": imported, "load": loaded, "first": first, "each": each, "batch": batch, "n": len(others)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--audio-dir", required=True, help="a folder of clips (wav)")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes for the cold figure")
    parser.add_argument("--clips", type=int, default=20, help="clips for the warm figure")
    args = parser.parse_args()
    clips = sorted(str(p) for p in Path(args.audio_dir).glob("*.wav"))[: 2 * args.clips + 2]
    if len(clips) < 2 * args.clips + 2:
        sys.exit(f"{args.audio_dir}: needs {2 * args.clips + 2} .wav clips for --clips {args.clips}")
    fresh = cold(args.plugin, clips[0], args.runs)
    inside = warm(args.plugin, clips[1 : args.clips + 2], clips[args.clips + 2 :])
    walls, loads = [w for w, _ in fresh], [s for _, s in fresh]
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"cold: autagent select, a fresh process: median {statistics.median(walls):.1f} s of {walls}")
    print(f"      of which the plugin's load (its text and audio encoders): median {statistics.median(loads):.1f} s")
    print(
        f"warm, in one process: imports {inside['import']:.1f} s, plugin load {inside['load']:.1f} s, "
        f"first clip {1000 * inside['first']:.0f} ms"
    )
    print(
        f"      each further clip alone: median {1000 * statistics.median(inside['each']):.0f} ms "
        f"over {len(inside['each'])} clips (features of a new clip + the router)"
    )
    print(
        f"      {inside['n']} other clips as one batch (select --batch): "
        f"{1000 * inside['batch'] / inside['n']:.0f} ms a clip"
    )


if __name__ == "__main__":
    main()

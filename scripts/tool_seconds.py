#!/usr/bin/env python
"""Tool-seconds per answer beside the counts, for every method of an evaluation (issue 61 item 5).

A plugin's manifest carries ``tool_seconds`` only when its run computed tool calls itself; a run whose
records were all cached (a frozen draw's evaluation) records none, so its methods' tool cost cannot be read
in seconds.  This script measures them apart and prices the predictions with them:

* ``--time DATA.json --clips N --out seconds.json``: each of the seven tools' seconds per clip on the first N
  clips of DATA.json, computed fresh (the in-process runner has no cache), one clip and one tool at a time in
  this one process, each tool warmed on the first clip first so its model load is not counted
  (bench/tools.py's ``seconds_per_clip``); the machine's load average at start and end is written beside them,
  since the figures are only as clean as the machine was idle;
* ``--predictions P.jsonl --seconds seconds.json --out table.json``: each method's mean tool-seconds per answer
  from its rows' ``tools`` lists, serial (one after another: the sum) and parallel (side by side on the pool:
  the slowest), exactly :func:`autagent.plugin.dial.tool_seconds_of`, and its share of All-Tools' seconds;
  prints a markdown table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autagent.plugin.dial import tool_seconds_of  # noqa: E402

REFERENCE = "all_tools"


def _bench():
    """bench/tools.py (a script, not a package; loaded by path so its name does not shadow ``tools``)."""
    spec = importlib.util.spec_from_file_location("bench_tools", ROOT / "bench" / "tools.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_tools(data: str, clips: int, tools: list[str] | None = None) -> dict:
    """Seconds per clip of each tool on the first ``clips`` clips of ``data`` (see the module docstring)."""
    from tools import ToolRunner

    bench = _bench()
    if not Path(data).is_file():
        raise SystemExit(f"{data}: no such dataset file")
    paths = bench.benchmark_clips(data, clips, Path("."))
    if not paths:
        raise SystemExit(f"{data}: no clips")
    tools = tools or list(bench.SEVEN)
    load_start = os.getloadavg()
    started = time.perf_counter()
    runner = ToolRunner("embedded")
    per_clip, errors = {}, {}
    for tool in tools:
        runner.run(tool, paths[0])  # load the model: not counted
        records: list[dict] = []
        per_clip[tool] = [round(s, 5) for s in bench.seconds_per_clip(runner, tool, paths, records)]
        errors[tool] = sum("error" in r for r in records)
    return {
        "data": str(data),
        "clips": len(paths),
        "profile": "embedded",
        "how": "one clip and one tool at a time in one process, fresh (no cache), model loads excluded",
        "seconds": {t: round(statistics.fmean(s), 5) for t, s in per_clip.items()},
        "median": {t: round(statistics.median(s), 5) for t, s in per_clip.items()},
        "errors": errors,
        "per_clip": per_clip,
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "niceness": os.nice(0),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }


def read_seconds(path: str) -> dict[str, float]:
    """The per-tool seconds of a ``--time`` output (its ``seconds`` mapping)."""
    try:
        seconds = json.loads(Path(path).read_text()).get("seconds")
    except (OSError, json.JSONDecodeError, AttributeError) as error:
        raise SystemExit(f"{path}: not a seconds file ({error})") from None
    if not isinstance(seconds, dict) or not all(isinstance(v, (int, float)) for v in seconds.values()):
        raise SystemExit(f"{path}: field 'seconds' must map each tool to its seconds per clip")
    return {str(k): float(v) for k, v in seconds.items()}


def read_subsets(path: str) -> dict[str, list[tuple[str, ...]]]:
    """Each method's rows' tool lists, in file order."""
    methods: dict[str, list[tuple[str, ...]]] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise SystemExit(f"{path}: {error.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise SystemExit(f"{path}:{number}: not JSON") from None
        if not isinstance(row, dict) or not isinstance(row.get("method"), str):
            raise SystemExit(f"{path}:{number}: field 'method' missing")
        if not isinstance(row.get("tools"), list):
            raise SystemExit(f"{path}:{number}: field 'tools' must be a list")
        methods.setdefault(row["method"], []).append(tuple(row["tools"]))
    return methods


def price(methods: dict[str, list[tuple[str, ...]]], seconds: dict[str, float]) -> dict[str, dict]:
    """Per method: answers, mean tools per answer, serial and parallel tool-seconds per answer and their shares of
    All-Tools' (None without an All-Tools row)."""
    table = {}
    for method, subsets in methods.items():
        cost = tool_seconds_of(subsets, seconds)
        if cost is None:
            missing = sorted({t for z in subsets for t in z} - set(seconds))
            raise SystemExit(f"method {method}: no seconds for tool(s) {', '.join(missing)}")
        table[method] = {"answers": len(subsets), "tools": round(sum(map(len, subsets)) / len(subsets), 3), **cost}
    reference = table.get(REFERENCE)
    for row in table.values():
        for mode in ("serial", "parallel"):
            row[f"{mode}_share"] = round(row[mode] / reference[mode], 4) if reference and reference[mode] else None
    return table


def markdown(table: dict[str, dict]) -> str:
    def pct(x):
        return "–" if x is None else f"{100 * x:.1f} %"

    lines = [
        "| method | answers | tools/answer | serial s/answer | share of All-Tools "
        "| parallel s/answer | share of All-Tools |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method, r in table.items():
        lines.append(
            f"| {method} | {r['answers']} | {r['tools']:.2f} | {r['serial']:.3f} | {pct(r['serial_share'])} "
            f"| {r['parallel']:.3f} | {pct(r['parallel_share'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time", metavar="DATA.json", help="measure each tool's seconds per clip on this dataset")
    parser.add_argument("--clips", type=int, default=40, help="how many of its first clips (with --time)")
    parser.add_argument("--predictions", metavar="P.jsonl", help="price each method's answers (with --seconds)")
    parser.add_argument("--seconds", metavar="seconds.json", help="a --time output")
    parser.add_argument("--out", required=True, help="where the JSON goes")
    args = parser.parse_args(argv)
    if bool(args.time) == bool(args.predictions):
        parser.error("give either --time or --predictions")
    if args.time:
        if args.clips < 1:
            parser.error("--clips must be at least 1")
        result = time_tools(args.time, args.clips)
        print(json.dumps({k: result[k] for k in ("seconds", "errors", "load_average_start", "load_average_end")}))
    else:
        if not args.seconds:
            parser.error("--predictions needs --seconds")
        seconds = read_seconds(args.seconds)
        table = price(read_subsets(args.predictions), seconds)
        result = {"predictions": args.predictions, "seconds_file": args.seconds, "seconds": seconds, "methods": table}
        print(markdown(table))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

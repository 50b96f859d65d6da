"""scripts/tool_seconds.py --predictions: each method's tool-seconds per answer from its rows' tool lists, serial
(the sum of a row's tools) and parallel (its slowest), and the share of All-Tools'; through its CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "tool_seconds.py"
SECONDS = {"asr": 0.5, "emotion": 0.1, "pitch": 0.03}


def _run(tmp_path: Path, rows: list[dict], seconds: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.json").write_text(json.dumps({"seconds": seconds or SECONDS, "clips": 3}))
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--predictions", str(tmp_path / "p.jsonl"), "--seconds", str(tmp_path / "s.json")]
        + ["--out", str(tmp_path / "out.json")],
        capture_output=True,
        text=True,
    )


def _row(method: str, tools: list[str]) -> dict:
    return {"id": "x", "method": method, "tools": tools, "correct": True}


def test_sums_maxima_and_shares_of_all_tools(tmp_path):
    every = ["asr", "emotion", "pitch"]
    rows = [_row("all_tools", every), _row("all_tools", every)]
    rows += [_row("policy", ["asr", "pitch"]), _row("policy", ["emotion", "pitch"]), _row("policy", [])]
    rows += [_row("no_tool", []), _row("no_tool", [])]
    done = _run(tmp_path, rows)
    assert done.returncode == 0, done.stderr
    methods = json.loads((tmp_path / "out.json").read_text())["methods"]
    assert methods["all_tools"]["serial"] == pytest.approx(0.63)  # 0.5 + 0.1 + 0.03
    assert methods["all_tools"]["parallel"] == pytest.approx(0.5)  # the slowest
    policy = methods["policy"]
    assert policy["answers"] == 3 and policy["tools"] == pytest.approx(4 / 3, abs=1e-3)
    assert policy["serial"] == pytest.approx((0.53 + 0.13 + 0) / 3, abs=1e-4)
    assert policy["parallel"] == pytest.approx((0.5 + 0.1 + 0) / 3, abs=1e-4)
    assert policy["serial_share"] == pytest.approx(0.22 / 0.63, abs=1e-4)
    assert policy["parallel_share"] == pytest.approx(0.2 / 0.5, abs=1e-4)
    assert methods["all_tools"]["serial_share"] == 1.0 and methods["no_tool"]["parallel"] == 0.0
    assert "| policy | 3 | 1.33 | 0.220 | 34.9 % | 0.200 | 40.0 % |" in done.stdout


def test_without_all_tools_the_shares_are_empty(tmp_path):
    done = _run(tmp_path, [_row("policy", ["asr"])])
    assert done.returncode == 0, done.stderr
    policy = json.loads((tmp_path / "out.json").read_text())["methods"]["policy"]
    assert policy["serial"] == 0.5 and policy["serial_share"] is None


@pytest.mark.parametrize(
    "rows, message",
    [
        ([_row("policy", ["chords"])], "method policy: no seconds for tool(s) chords"),
        ([{"method": "policy", "tools": "asr"}], "p.jsonl:1: field 'tools' must be a list"),
        ([_row("policy", []), {"tools": []}], "p.jsonl:2: field 'method' missing"),
    ],
)
def test_bad_input_is_one_line_naming_the_row_or_tool(tmp_path, rows, message):
    done = _run(tmp_path, rows)
    assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr

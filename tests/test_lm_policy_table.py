"""scripts/lm_policy_table.py: the text LM policy's results table from runs' predictions (issue 65)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.scripts import load_script


def write_run(root: Path, name: str, methods: dict) -> Path:
    """A run folder whose predictions hold ``methods``: ``{method: [(correct, tools), ...]}`` by item."""
    run = root / name
    run.mkdir()
    rows = [
        {"id": f"test-{i:05d}", "method": method, "tools": ["asr"] * tools, "correct": correct}
        for method, items in methods.items()
        for i, (correct, tools) in enumerate(items)
    ]
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "metrics.json").write_text(json.dumps({"training": {"steps": 3}, "timings": {"phases": {"total": 9}}}))
    return run


def test_the_table_puts_the_trivial_constant_and_the_seeds_spread_beside_each_trained_seed(tmp_path, capsys):
    n = 40
    shared = {"no_tool": [(i < 10, 0) for i in range(n)], "all_tools": [(i < 30, 7) for i in range(n)]}
    shared["single:asr"] = [(i < 20, 1) for i in range(n)]
    seeds = [
        write_run(tmp_path, f"s{k}", {**shared, "policy": [(i < 20 + 4 * k, 1) for i in range(n)]}) for k in (0, 1, 2)
    ]
    zero = write_run(tmp_path, "zero", {**shared, "policy": [(i < 10, 1) for i in range(n)]})
    load_script("lm_policy_table").main(["--trained", *map(str, seeds), "--zero-shot", str(zero)])
    out = capsys.readouterr().out
    assert "| ASR alone on every item (single:asr) | 50.0 | 1.00 |" in out
    assert "| SmolLM2 + GRPO, mean of 3 seeds (± sd) | 60.0 ± 10.0 | 1.00 |" in out
    # seed 2 answers 28 of 40: +45 points over the zero-shot start, +20 over ASR alone, -2.5 vs All-Tools
    line = next(x for x in out.splitlines() if x.startswith("| s2 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1].startswith("+45.0 [") and cells[3].startswith("+20.0 [") and cells[2].startswith("-5.0 [")
    assert cells[4] == "—"  # no router given


def test_a_run_without_the_constant_leaves_its_column_empty_and_a_missing_method_is_named(tmp_path, capsys):
    shared = {"no_tool": [(True, 0)] * 4, "all_tools": [(True, 7)] * 4}
    run = write_run(tmp_path, "s0", {**shared, "policy": [(True, 1)] * 4})
    zero = write_run(tmp_path, "zero", shared)
    with pytest.raises(SystemExit, match="zero/predictions.jsonl: no rows of method 'policy'"):
        load_script("lm_policy_table").main(["--trained", str(run), "--zero-shot", str(zero)])
    load_script("lm_policy_table").main(["--trained", str(run), "--zero-shot", str(run)])
    out = capsys.readouterr().out
    assert "single:asr" not in out and "| s0 | +0.0 [+0.0, +0.0] | +0.0 [+0.0, +0.0] | — | — |" in out

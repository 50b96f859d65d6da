"""``make gpu-check``: one clear line and exit 0 where no GPU exists; the same code through the trainer on the
CPU (the plumbing a GPU session relies on); its table written between docs/cluster.md's markers only."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: make gpu-check would measure")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_0():
    out = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines() == [
        f"gpu-check: no CUDA device here (torch {torch.__version__}); nothing measured, nothing written."
    ]


def test_the_table_goes_between_the_markers_and_nowhere_else(tmp_path, monkeypatch):
    gpu_check = _module()
    doc = tmp_path / "cluster.md"
    doc.write_text(f"before\n{gpu_check.BEGIN}\nold table\n{gpu_check.END}\nafter\n")
    monkeypatch.setattr(gpu_check, "DOC", doc)
    monkeypatch.setattr(gpu_check, "RESULTS", tmp_path / "gpu_check.json")
    monkeypatch.delenv("OUT", raising=False)
    result = {
        "run": "7b-lora",
        "device": "cuda",
        "phases": {"2/sampling": {"measured_gb": 40.0, "plan_gb": 43.6}},
        "rollouts": [{"step": 2, "seconds": 26.6, "chunks": 8, "decoding_steps": 256, "prompt_tokens": 1513}],
        "floor_ms": {"card": "NVIDIA H100 80GB HBM3", "weights_ms": 4.6, "with_kv_ms": 6.7},
    }
    gpu_check.publish({"7b-lora": result})
    text = doc.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old table" not in text
    assert "| 7b-lora | NVIDIA H100 80GB HBM3 | sampling (2) | 40.00 | 43.60 | +9.0 % |" in text
    assert "| 7b-lora | 2 | 13.0 | 4.6 / 6.7 |" in text  # 26.6 s / (8 chunks x 256 steps)
    assert json.loads((tmp_path / "gpu_check.json").read_text())["7b-lora"]["run"] == "7b-lora"


@pytest.mark.slow
def test_the_tiny_run_goes_through_the_trainer_on_the_cpu():
    """``--device cpu``: two GRPO steps of the tiny model through the project's trainer with the phase
    boundaries instrumented, rollout protection and bf16 movement checked (no memory figures on a CPU)."""
    env = {**os.environ, "GPU_CHECK_LEARNING_STEPS": "2", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--runs", "tiny"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout[out.stdout.index("{") :])["tiny"]
    assert "error" not in result, result
    assert [r["step"] for r in result["rollouts"]] == [1, 2] and result["rollouts"][0]["prompt_tokens"] > 1000
    assert result["checks"]["rollout_protected"] and result["checks"]["bf16_moves_like_fp32"]

"""``make gpu-check``: one clear line and exit 0 where no GPU exists; the same code through the trainer on the
CPU (the plumbing a GPU session relies on); its table written between docs/cluster.md's markers only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _module():
    return load_script("gpu_check")


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


class FakeCuda:
    """torch.cuda's memory functions over counters a test sets: an 80 GB card holding 0.6 GB outside the
    caching allocator (the CUDA context)."""

    def __init__(self):
        self.now = self.peak = (0.0, 0.0)  # (allocated, reserved)
        self.outside, self.total = 0.6e9, 80e9

    def use(self, allocated: float, reserved: float) -> None:
        self.now = (allocated, reserved)
        self.peak = (max(self.peak[0], allocated), max(self.peak[1], reserved))

    def synchronize(self):
        pass

    def reset_peak_memory_stats(self):
        self.peak = self.now

    def max_memory_allocated(self):
        return self.peak[0]

    def max_memory_reserved(self):
        return self.peak[1]

    def memory_allocated(self):
        return self.now[0]

    def memory_reserved(self):
        return self.now[1]

    def mem_get_info(self):
        return self.total - self.now[1] - self.outside, self.total


def test_the_meter_records_the_allocators_peak_its_reserve_and_the_cards_use():
    """Per phase: max_memory_allocated, max_memory_reserved and the card's use at that peak (the reserve plus
    what mem_get_info shows outside the allocator); a phase's peak does not leak into the next."""
    cuda = FakeCuda()
    meter = _module().PhaseMeter(True, cuda)
    meter.step = 1
    meter.enter("sampling")
    cuda.use(30e9, 31e9)
    cuda.use(20e9, 31e9)
    meter.enter("rewards")
    cuda.use(21e9, 31e9)
    meter.enter(None)
    cuda.use(18e9, 31e9)
    meter.allocated("between")
    assert meter.rounded() == {
        "1/sampling": {"measured_gb": 30.0, "reserved_gb": 31.0, "card_gb": 31.6},
        "1/rewards": {"measured_gb": 21.0, "reserved_gb": 31.0, "card_gb": 31.6},
        "1/between": {"measured_gb": 18.0, "reserved_gb": 31.0, "card_gb": 31.6},
    }
    assert _module().PhaseMeter(False, cuda).rounded() == {}


def test_the_one_gpu_recipe_is_measured_at_its_own_settings(tmp_path):
    """``1gpu`` trains experiments/paper_qwen2audio_1gpu.yaml as shipped (its 24-row chunks, 256-token
    completions, 24 micro-batches of 8, LoRA, static cache) for two steps on the 8.40 B shapes, and is
    planned as ``autagent plan`` plans the shipped file."""
    from autagent.config import load_config
    from autagent.policies.lm.plan.arithmetic import GB, plan_training

    gpu_check = _module()
    config = gpu_check.run_config("1gpu", tmp_path / "shape")
    shipped = load_config(ROOT / "experiments" / "paper_qwen2audio_1gpu.yaml")
    lm, ours = shipped.policy.lm, config.policy.lm
    for name in ("generation_batch_size", "per_device_train_batch_size", "gradient_accumulation_steps"):
        assert getattr(ours, name) == getattr(lm, name)
    assert (ours.max_completion_length, ours.lora, ours.rollout, ours.bf16) == (256, lm.lora, lm.rollout, True)
    assert (config.grpo.steps, config.grpo.group_size, config.grpo.beta) == (2, shipped.grpo.group_size, 0.04)
    assert ours.generation_batch_size == 24 and ours.gradient_accumulation_steps == 24
    assert plan_training(config, 1488).total == plan_training(shipped, 1488).total < 78 * GB

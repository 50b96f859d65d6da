"""Training on the cluster (its models: ``test_cluster_models.py``), its own bugs each pinned: y_base
asked once across ranks, vLLM refused at config load, the memory plan's arithmetic against what torch
reports on a tiny model, and an install that resolves for a GPU node (no local wheel folder, the cluster
extras and DeepSpeed)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def test_y_base_is_asked_once_by_rank_0_and_every_rank_gets_it(tmp_path, speech_wav, music_wav):
    """Two real ranks (gloo): rank 0 asks the reasoner for the no-tool answers, rank 1 asks nothing, and
    both end with the same answers.  Counted at the reasoner itself, in each process."""
    code = textwrap.dedent(f"""
        import json, os, sys
        from accelerate import PartialState
        from autagent.data.sample import Sample
        from autagent.policies.lm.recipe import baseline_answers
        from autagent.reasoners import CachedReasoner
        from autagent.reasoners.base import Reply

        class Counting:
            name = "counting"
            asked = []
            def fingerprint(self): return "counting-1"
            def answer_many(self, requests):
                self.asked += [s.id for s, _ in requests]
                return [Reply(s.choices[0]) for s, _ in requests]

        state = PartialState(cpu=True)
        inner = Counting()
        samples = [Sample(id=f"s{{i}}", audio=path, question=f"q{{i}}", choices=("a", "b"), answer="a")
                   for i, path in enumerate([{str(speech_wav[0])!r}, {str(music_wav)!r}] * 3)]
        base = baseline_answers(CachedReasoner(inner, None), samples, state)
        out = {{"rank": state.process_index, "asked": inner.asked, "base": base}}
        open(os.path.join({str(tmp_path)!r}, f"rank{{state.process_index}}.json"), "w").write(json.dumps(out))
        state.destroy_process_group()
    """)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
        }
        procs.append(
            subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        )
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["asked"] == [f"s{i}" for i in range(6)] and ranks[1]["asked"] == []
    assert ranks[0]["base"] == ranks[1]["base"] == {f"s{i}": "a" for i in range(6)}


def test_use_vllm_is_refused_at_config_load_naming_the_field():
    from autagent.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"policy.lm.extra_args.use_vllm: the LM policy hears the clip"):
        load_config("experiments/paper_qwen2audio.yaml", {"policy.lm.extra_args": {"use_vllm": True}})
    load_config("experiments/paper_qwen2audio.yaml", {"policy.lm.extra_args": {"use_vllm": False}})


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    from autagent.policies.lm.recipe import build_tiny_policy

    return build_tiny_policy(tmp_path_factory.mktemp("plan") / "policy", seed=0)


def test_the_memory_plan_counts_what_torch_reports_on_a_tiny_model(tiny_policy):
    """Parameters, weight bytes, AdamW's state after a real step and the KV cache of a real forward pass,
    each from the plan's arithmetic and from the tensors torch allocates."""
    from transformers import Qwen2AudioForConditionalGeneration

    from autagent.policies.lm.plan.shapes import Architecture

    arch = Architecture.of(str(tiny_policy))
    model = Qwen2AudioForConditionalGeneration.from_pretrained(tiny_policy, dtype=torch.float32)
    parameters = list(model.parameters())
    assert arch.parameters == sum(p.numel() for p in parameters)
    optimizer = torch.optim.AdamW(parameters, lr=1e-3)
    ids = torch.randint(0, arch.vocab, (3, 11))
    model(input_ids=ids).logits.sum().backward()
    for p in parameters:  # the audio tower gets no gradient from text alone; AdamW keeps state only where one is
        p.grad = torch.zeros_like(p) if p.grad is None else p.grad
    optimizer.step()
    moments = sum(
        v.numel() * v.element_size()
        for state in optimizer.state.values()
        for k, v in state.items()
        if k in ("exp_avg", "exp_avg_sq")
    )
    assert moments == 2 * 4 * arch.parameters  # the plan's "AdamW moments" row for an fp32 model (or bf16 masters)
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    measured = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert measured == arch.kv_cache_bytes(rows=3, tokens=11, dtype_bytes=4)


def test_the_plan_of_the_paper_config_fits_its_cards_and_refuses_what_does_not():
    from autagent.config import load_config
    from autagent.policies.lm.plan.arithmetic import plan_training
    from autagent.policies.lm.plan.report import main_plan
    from autagent.policies.lm.plan.shapes import audio_tokens

    paper = load_config("experiments/paper_qwen2audio.yaml")
    plan = plan_training(paper)
    held = {item: nbytes for item, nbytes, _ in plan.phases[(2, "between")][0][1]}
    assert round(held["policy weights (bf16, flat)"] / 2 / 1e9, 1) == 8.4  # Qwen2-Audio-7B-Instruct: 8.4 B parameters
    assert held["AdamW moments (fp32 partition)"] == pytest.approx(8 * held["policy weights (bf16, flat)"] / 2 / 8)
    assert audio_tokens(30.0) == 750
    for gb in (80, 141):
        table, fits = main_plan(paper, gb)
        assert fits and "**fits**" in table
    table, fits = main_plan(paper, 40)
    assert not fits and "does NOT fit" in table
    heavy = load_config("experiments/paper_qwen2audio.yaml", {"policy.lm.generation_batch_size": 24})
    assert plan_training(heavy).total > plan.total  # chunking generation is what keeps the KV cache small
    every_position = load_config("experiments/paper_qwen2audio.yaml", {"policy.lm.rollout.prompt_logits": "all"})
    added = {item: b for item, b, _ in plan_training(every_position).peak(2, "sampling")[2]}
    assert added["prompt logits"] == 8 * 1520 * 156032 * 2  # bf16; DeepSpeed's engine makes no fp32 copy of them
    assert "their fp32 copy" not in added and plan.peak(2, "sampling")[1] == "decoding"


@pytest.mark.skipif(shutil.which("uv", path=str(Path(sys.executable).parent)) is None, reason="needs uv in the venv")
def test_the_install_resolves_for_a_gpu_node_without_the_local_wheel_folder():
    """A resolver dry run for linux x86_64 with the cluster and gpu extras (DeepSpeed): no download of
    the packages themselves, no local wheel folder, torch within the pyproject's tested range."""
    uv = Path(sys.executable).parent / "uv"
    out = subprocess.run(
        [
            str(uv),
            "pip",
            "compile",
            "pyproject.toml",
            "--extra",
            "cluster",
            "--extra",
            "gpu",
            "--extra",
            "test",
            "--python-platform",
            "x86_64-manylinux_2_28",
            "--python-version",
            "3.11",
            "--no-header",
            "--quiet",
            "--no-config",
            "--index-url",
            "https://pypi.org/simple",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    pins = dict(line.split("==", 1) for line in out.stdout.splitlines() if "==" in line and not line.startswith(" "))
    major, minor = map(int, pins["torch"].split(".")[:2])
    assert (2, 11) <= (major, minor) < (2, 15) and "+cpu" not in pins["torch"]
    assert {"deepspeed", "funasr", "pyannote-audio", "trl", "transformers"} <= set(pins)


@pytest.mark.slow
def test_the_rehearsal_of_the_paper_configuration_passes(tmp_path):
    """``make rehearse`` end to end (about 5 minutes): two ranks, two Ray nodes, a killed rank and a
    resume, the plugin exported and evaluated; every check of its report holds."""
    work = tmp_path / "rehearsal"
    out = subprocess.run(
        [sys.executable, "scripts/rehearse.py", "--work", str(work)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,  # 5 minutes on a quiet 2-core machine; much more beside other jobs
    )
    written = work / "report.json"
    assert written.exists(), f"no report (exit code {out.returncode}): {out.stdout[-2000:]}{out.stderr[-3000:]}"
    report = json.loads(written.read_text())
    assert out.returncode == 0 and report["ok"], (report.get("checks"), out.stdout[-2000:])
    assert report["ranks"]["0"]["baseline_calls"][0] == 12 and report["ranks"]["1"]["baseline_calls"][0] == 0

#!/usr/bin/env python
"""The cluster path, rehearsed on a CPU: ``experiments/paper_qwen2audio.yaml`` with only sizes, paths
and devices changed (``OVERRIDES`` below, each with its reason), run end to end.

1. tiny random-weight models built here from configs: the Qwen2-Audio policy and reasoner, Whisper,
   emotion2vec, AST and a pyannote pipeline (``autagent.testing.tiny_models``); no download;
2. data in the published formats: an AVQA JSONL (R1-AQA's fields) for training and an MMAU test-mini
   JSON for evaluation, over clips of the embedded benchmark;
3. a Ray cluster of two nodes (``ray.cluster_utils.Cluster``) that the tools' actors spread over;
4. ``autagent train`` with the paper's launcher (accelerate, 2 processes, gloo between CPU ranks),
   gradient checkpointing on, the ``reward`` advantage and the ``grpo`` loss, W&B offline;
5. rank 1 SIGKILLed once the second checkpoint is on disk, then ``make resume`` (``autagent train
   --resume``), which finishes training, exports the plugin and evaluates every baseline;
6. ``autagent eval --plugin`` on the MMAU file with the exported plugin;
7. a JSON report (``<work>/report.json``): ranks that trained, Ray nodes that ran tools, reasoner
   calls per rank (y_base asked once, by rank 0), failures, the plugin's hash, stage times, and what
   could not run on a CPU (DeepSpeed ZeRO-2).  The exit code is 0 only if every check holds.

Usage: .venv/bin/python scripts/rehearse.py [--work runs/rehearsal] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PAPER = ROOT / "experiments" / "paper_qwen2audio.yaml"
TRAIN_ROWS, TEST_ROWS, STEPS, KILL_AFTER_CHECKPOINT = 12, 6, 6, 2


def overrides(work: Path, models: dict[str, Path], data: dict[str, Path], ray_address: str) -> dict:
    """What the rehearsal changes in the paper's config, and nothing else: model sizes (tiny local
    models), paths, CPU devices, the run's length and batch, and the launcher's machine type."""
    cpu = {"device": "cpu"}
    return {
        "name": "paper_qwen2audio_rehearsal",  # its own run folder
        "output_dir": str(work / "runs"),
        "answer_cache_dir": str(work / "answers"),
        "data.train": str(data["train"]),  # AVQA format, as the paper's
        "data.test": str(data["test"]),  # MMAU test-mini format, as the paper's
        "tools.ray_address": ray_address,  # the two-node test cluster instead of `ray start --head`
        "tools.scheduling": "spread",  # so that both nodes run tools
        "tools.cache_dir": str(work / "tools-cache"),
        "tools.gpu_fraction": {},  # no GPUs
        # speaker diarization joins the paper's six, as docs/cluster.md describes, to run pyannote too
        "tools.enabled": ["asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers"],
        "tools.settings": {
            "asr": {"model_id": str(models["whisper"]), **cpu, "language": None, "max_new_tokens": 8},
            "emotion": {"model_id": str(models["emotion2vec"]), **cpu},
            "sound_events": {"model_id": str(models["ast"]), **cpu},
            "speakers": {"model_id": str(models["pyannote"]), **cpu},
        },
        "reasoner.kind": "qwen2-audio",  # the paper config serves it apart; here a tiny one runs in each rank
        "reasoner.qwen2_audio.model_id": str(models["reasoner"]),
        "reasoner.qwen2_audio.device": "cpu",
        "reasoner.qwen2_audio.dtype": "float32",  # bf16 matmuls are slow on this CPU
        "policy.lm.model_id": str(models["policy"]),
        "policy.lm.use_cpu": True,
        "policy.lm.per_device_train_batch_size": 2,  # x 2 ranks x 3 accumulation steps = 12 = 2 prompts x G 6
        "policy.lm.save_steps": KILL_AFTER_CHECKPOINT,
        # a random tiny model never writes a valid <answer> unaided: the grammar makes it, so that the
        # rewards run the selected tools and ask the reasoner with their records, as a trained model does
        "policy.lm.constrained_decoding": True,
        "grpo.steps": STEPS,
        "launcher.accelerate_config": "experiments/accelerate/cpu2.yaml",  # CPU ranks (no DeepSpeed here)
        "launcher.num_processes": 2,
        "logging.wandb_mode": "offline",
    }


def build_models(folder: Path) -> dict[str, Path]:
    """Every tiny model the paper's configuration names, built once (deterministic from its seed)."""
    from autagent.policies.lm.recipe import build_tiny_policy
    from autagent.testing import tiny_models

    builders = {
        "policy": lambda p: build_tiny_policy(p, seed=0),
        "reasoner": lambda p: build_tiny_policy(p, seed=1),
        "whisper": tiny_models.build_tiny_whisper,
        "emotion2vec": tiny_models.build_tiny_emotion2vec,
        "ast": tiny_models.build_tiny_ast,
        "pyannote": tiny_models.build_tiny_pyannote,
    }
    paths = {}
    for name, build in builders.items():
        path = folder / name
        if not (path / ".complete").exists():
            shutil.rmtree(path, ignore_errors=True)
            build(path)
            (path / ".complete").write_text("built\n")
        paths[name] = path
    return paths


def build_data(folder: Path) -> dict[str, Path]:
    """An AVQA JSONL for training and an MMAU JSON for testing, over embedded-benchmark clips."""
    from autagent.data.generator import EmbeddedBenchmarkConfig, generate
    from autagent.data.loaders import load_dataset, write_mmau

    made = generate(
        EmbeddedBenchmarkConfig(root=str(folder / "clips"), seed=11, sizes={"train": TRAIN_ROWS, "test": TEST_ROWS}),
        progress=False,
    )
    train = load_dataset(made["train"])
    avqa = folder / "avqa" / "avqa_train.jsonl"
    avqa.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "id": i,
            "question_text": s.question,
            "multi_choice": list(s.choices),
            "answer": s.choices.index(s.answer),
            "audio_path": os.path.relpath(s.audio, avqa.parent),
            "question_type": s.category,
        }
        for i, s in enumerate(train)
    ]
    avqa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mmau = folder / "mmau" / "mmau-test-mini.json"
    write_mmau(load_dataset(made["test"]), mmau)
    return {"train": avqa, "test": mmau}


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def autagent(*args: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    handle = open(log, "a")
    return subprocess.Popen(
        [sys.executable, "-m", "autagent.cli", *args], cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT
    )


def kill_rank_one_after_checkpoint(process: subprocess.Popen, run_dir: Path, timeout: float) -> dict:
    """Wait until checkpoint-KILL_AFTER_CHECKPOINT is complete on disk, then SIGKILL rank 1."""
    checkpoint = run_dir / "trainer" / f"checkpoint-{KILL_AFTER_CHECKPOINT}"
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if (checkpoint / "trainer_state.json").exists():
            pids = [e["pid"] for e in events(run_dir) if e["event"] == "started" and e["rank"] == 1]
            if pids:
                os.kill(pids[-1], signal.SIGKILL)
                return {"killed_rank": 1, "pid": pids[-1], "after": checkpoint.name, "at": round(time.time(), 1)}
        time.sleep(0.5)
    return {"killed_rank": None, "why": f"{checkpoint} never appeared (exit code {process.poll()})"}


def run_stages(report: dict, stages: dict, config_path: Path, run_dir: Path, work: Path, log: Path) -> None:
    """Train until rank 1 is killed, resume to the end (export, evaluation), then ``autagent eval``."""
    t0 = time.perf_counter()
    first = autagent("train", "--config", str(config_path), log=log)
    # the wait ends with the first run whatever the timeout: it is long for a loaded machine (on two busy cores
    # beside the test suite's other worker and an experiment, checkpoint-2 took more than 600 s to appear)
    report["kill"] = kill_rank_one_after_checkpoint(first, run_dir, timeout=1800)
    report["first_run_exit_code"] = first.wait(timeout=1800)
    stages["train_until_kill_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    venv = Path(sys.executable).parent.parent
    with open(log, "a") as handle:
        resume = subprocess.run(
            ["make", "resume", f"CONFIG={config_path}", f"VENV={venv}"],
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            timeout=900,
        )
    report["resume_exit_code"] = resume.returncode
    stages["resume_train_export_eval_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    evaluated = autagent(
        "eval",
        "--config",
        str(config_path),
        "--plugin",
        str(run_dir / "plugin"),
        "--out",
        str(work / "eval"),
        log=log,
    )
    report["eval_exit_code"] = evaluated.wait(timeout=900)
    stages["eval_plugin_s"] = time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="runs/rehearsal", help="folder for models, data, runs and the report")
    parser.add_argument("--keep", action="store_true", help="keep the run folder of an earlier rehearsal")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    work = Path(args.work) if Path(args.work).is_absolute() else (ROOT / args.work).resolve()
    if not args.keep:
        for sub in ("runs", "answers", "tools-cache"):
            shutil.rmtree(work / sub, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    stages: dict[str, float] = {}
    started = time.perf_counter()

    import ray
    from ray.cluster_utils import Cluster

    from autagent.config import load_config, save_config

    t0 = time.perf_counter()
    models = build_models(ROOT / ".cache" / "tiny-models")
    data = build_data(work / "data")
    stages["models_and_data_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    report: dict = {"base": os.path.relpath(PAPER, ROOT)}
    try:
        cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        node_ids = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        ray.shutdown()
        stages["ray_cluster_s"] = time.perf_counter() - t0

        config = load_config(PAPER, overrides(work, models, data, cluster.address))
        config_path = work / "paper_qwen2audio_rehearsal.yaml"
        save_config(config, config_path)
        run_dir = config.run_dir
        log = work / "train.log"
        log.write_text("")
        report["config"] = os.path.relpath(config_path, ROOT)
        report["overrides"] = sorted(overrides(work, models, data, cluster.address))
        run_stages(report, stages, config_path, run_dir, work, log)
    finally:
        cluster.shutdown()  # never leave the test cluster running: a later ray.init would find it
    stages["total_s"] = time.perf_counter() - started
    report.update(summarise(run_dir, work / "eval", node_ids, TRAIN_ROWS))
    report["stages"] = {k: round(v, 1) for k, v in stages.items()}
    report["not_run_on_cpu"] = {
        "deepspeed_zero2": "not run: experiments/accelerate/zero2.yaml needs CUDA (DeepSpeed is not installed on "
        "CPU machines), so the CPU ranks train under DDP with gloo; docs/cluster.md says where ZeRO-2 has run",
        "bf16": "run as the paper config sets it: the policy's passes autocast to bf16 over fp32 masters on the CPU "
        "ranks under DDP (policy.lm.bf16); the reasoner answers in fp32 here",
    }
    report["ok"] = all(report["checks"].values()) and not report.get("error")
    (work / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("checks", "ok", "stages", "plugin_hash")}, indent=2))
    print(f"report: {work / 'report.json'}  log: {log}")
    return 0 if report["ok"] else 1


def summarise(run_dir: Path, eval_dir: Path, node_ids: list[str], train_rows: int) -> dict:
    """What the run's events, metrics and plugin show, and the checks the rehearsal must pass."""
    rows = events(run_dir)
    starts = [e for e in rows if e["event"] == "started"]
    trained = [e for e in rows if e["event"] == "trained"]
    baselines = [e for e in rows if e["event"] == "baseline"]
    tool_nodes = sorted({n for e in rows if e["event"] == "tools" for n in e["nodes"].values()})
    metrics = json.loads((run_dir / "metrics.json").read_text()) if (run_dir / "metrics.json").exists() else {}
    evaluated = json.loads((eval_dir / "metrics.json").read_text()) if (eval_dir / "metrics.json").exists() else {}
    manifest = run_dir / "plugin" / "manifest.json"
    plugin_hash = json.loads(manifest.read_text())["content_hash"] if manifest.exists() else None
    first_run = [e for e in baselines if not any(s["pid"] == e["pid"] and s.get("resume") for s in starts)]
    resumed_from = [e["checkpoint"] for e in rows if e["event"] == "resume_from"]
    per_rank = {
        str(rank): {
            "steps": max((e["steps"] for e in trained if e["rank"] == rank), default=None),
            "reasoner_calls": sum(e["reasoner_calls"] for e in trained if e["rank"] == rank),
            "baseline_calls": [e["reasoner_calls"] for e in baselines if e["rank"] == rank],
            "failures": sum(e["reasoner_failures"] for e in trained if e["rank"] == rank),
        }
        for rank in sorted({e["rank"] for e in starts})
    }
    checks = {
        "two_ranks_trained": sorted(int(r) for r, v in per_rank.items() if v["steps"] == STEPS) == [0, 1],
        "two_ray_nodes_ran_tools": len(set(tool_nodes) & set(node_ids)) == 2,
        "y_base_asked_once_by_rank_0": sorted((e["rank"], e["reasoner_calls"]) for e in first_run)
        == [(0, train_rows), (1, 0)],
        "rank_1_killed_and_resumed": any(s.get("resume") for s in starts),
        "resumed_from_the_checkpoint_before_the_kill": resumed_from == [f"checkpoint-{KILL_AFTER_CHECKPOINT}"] * 2,
        "plugin_exported": plugin_hash is not None,
        "resumed_run_evaluated": "policy" in metrics.get("methods", {}),
        "plugin_evaluated_by_autagent_eval": "policy" in evaluated.get("methods", {}),
        "no_reasoner_failures": all(v["failures"] == 0 for v in per_rank.values()),
        "wandb_offline_run_written": any((run_dir / "wandb").glob("offline-run-*")),
    }
    return {
        "ranks": per_rank,
        "resumed_from": resumed_from,
        "ray_nodes": {"cluster": node_ids, "ran_tools": tool_nodes},
        "plugin_hash": plugin_hash,
        "policy_accuracy": {
            "after_resume": metrics.get("methods", {}).get("policy", {}).get("accuracy"),
            "autagent_eval": evaluated.get("methods", {}).get("policy", {}).get("accuracy"),
        },
        "training_timings": metrics.get("timings"),
        "checks": checks,
    }


if __name__ == "__main__":
    sys.exit(main())

"""``make gpu-check``: the paper's configuration on a real GPU, measured against the memory plan.

On a CUDA machine each run builds random weights of a model's published shapes directly on the GPU and trains
two GRPO steps through the project's trainer (:func:`build_grpo_trainer`, the real rollout, TRL's update),
recording:

* the peak memory of each phase (sampling, rewards, update, optimizer step, between steps) in steps 1
  and 2 (``torch.cuda.max_memory_allocated``, reset at each boundary) beside ``autagent plan``'s
  figure for the same settings and the measured prompt length;
* the rollout's milliseconds per decoding step of a generation chunk (prefill included) in each step,
  beside the HBM floor: the decoder's bf16 weights, and the KV cache, read once a step;
* for the tiny model: rollout protection under gradient checkpointing (greedy completions sampled in
  the trainer's training state equal those in eval mode) and bf16 learning (at lr 1e-6, bf16 over fp32
  masters moves the weights as far as fp32 does; on the rewarded-index task the rewarded completion's
  log-probability rises).

Runs: ``tiny`` (full fine-tuning, fp32 masters), ``tiny-zero2``, ``2b`` (2.09 B: the real audio tower and a
16-layer decoder), ``2b-zero2`` (DeepSpeed ZeRO-2, where installed), ``7b-lora`` (the 8.40 B shapes of
Qwen2-Audio-7B through ``experiments/paper_qwen2audio_1gpu.yaml``'s LoRA recipe, static KV cache, compiled
decoding). Each run is its own process; a run that fails is recorded with its error. What each measures is its
own module beside this one: ``gpu_check_memory.py`` (each phase's peak against the plan), ``gpu_check_speed.py``
(the decoding floor), ``gpu_check_tiny.py`` (the tiny model's checks); this one builds and runs each
configuration, and publishes. Results go to ``autagent/policies/lm/plan/gpu_check.json`` (merged by run; package
data: the plan reads it) and to the table between the gpu-check markers in docs/cluster.md. Without CUDA it
prints one line and exits 0. ``--device cpu`` runs the same code on the CPU without memory figures (the plumbing
test, ``tests/test_gpu_check.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # what each part measures: gpu_check_*.py beside it
from gpu_check_memory import PhaseMeter, instrument, meter_peak  # noqa: E402
from gpu_check_speed import decode_floor  # noqa: E402
from gpu_check_tiny import SIX, master, tiny_checks  # noqa: E402

from autagent.policies.lm.plan.terms import GPU_CHECK_RUNS as RESULTS  # noqa: E402

__all__ = ["PhaseMeter", "decode_floor", "instrument", "master", "meter_peak", "tiny_checks"]

DOC = ROOT / "docs" / "cluster.md"
BEGIN, END = "<!-- gpu-check:begin -->", "<!-- gpu-check:end -->"
SMALLER_DECODER = {
    # The ~2 B shapes of issue #33's table: Qwen2-Audio-7B's audio tower under a decoder of 16 layers x 2048.
    "2b": {
        "hidden_size": 2048,
        "intermediate_size": 5504,
        "num_hidden_layers": 16,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
    },
    "7b": {},  # the published Qwen2-Audio-7B-Instruct shapes (autagent.policies.lm.plan.shapes.KNOWN_CONFIGS)
}
RUNS = {
    "tiny": {"shape": "tiny"},
    "tiny-zero2": {"shape": "tiny", "deepspeed": True},
    "2b": {"shape": "2b"},
    "2b-zero2": {"shape": "2b", "deepspeed": True},
    "7b-lora": {"shape": "7b", "lora": True},
    # the one-GPU recipe as shipped: its own chunk size (24 rows), completion length, 24 micro-batches of 8
    "1gpu": {"shape": "7b", "config": "experiments/paper_qwen2audio_1gpu.yaml"},
}
PAPER = "experiments/paper_qwen2audio.yaml"


def config_file(name: str) -> Path:
    """The run config a run starts from: its own (``1gpu``), else the paper's."""
    return ROOT / RUNS[name].get("config", PAPER)


def settings(run: dict, device: str) -> dict:
    """The run's overrides of its config file (one process; the reasoner not used): for a run with its
    own config file only what a two-step measurement needs, else the sizes below."""
    measurement = {
        "launcher": {"kind": "python"},
        "reasoner.kind": "openai",
        "grpo.steps": 2,
        "logging": {"wandb": False, "progress": False},
        "policy.lm.use_cpu": device == "cpu",
        "policy.lm.save_steps": 10_000,
    }
    if run.get("config"):
        return measurement
    big = run["shape"] != "tiny" and device == "cuda"
    lm = {
        "policy.lm.bf16": True,
        "policy.lm.gradient_checkpointing": True,
        "policy.lm.per_device_train_batch_size": 8 if big else 4,
        "policy.lm.gradient_accumulation_steps": 3 if big else 1,
        "policy.lm.generation_batch_size": 8 if big else 4,
        "policy.lm.max_completion_length": 256 if big else 16,
        "policy.lm.deepspeed": "experiments/accelerate/zero2.json" if run.get("deepspeed") else None,
        "policy.lm.lora": {"r": 16, "alpha": 32.0} if run.get("lora") else None,
        "policy.lm.rollout": {"prompt_logits": "last", "cache": "static" if big else "dynamic"},
    }
    return {**measurement, "grpo.group_size": 4 if not big else 6, "grpo.beta": 0.04, **lm}


def model_folder(shape: str, folder: Path) -> Path:
    from autagent.policies.lm.prompt import AGENT_PROMPT
    from autagent.policies.lm.recipe import build_tiny_policy
    from autagent.testing.tiny_models import write_qwen2_audio_shapes

    if shape == "tiny":
        return build_tiny_policy(folder)
    return write_qwen2_audio_shapes(folder, shapes_of(shape), prompts=(AGENT_PROMPT,))


def shapes_of(shape: str) -> dict:
    """``audio_config`` and ``text_config`` of a non-tiny run's model: Qwen2-Audio-7B-Instruct's published
    shapes, the decoder replaced by :data:`SMALLER_DECODER`'s for ``2b``."""
    from autagent.policies.lm.plan.shapes import KNOWN_CONFIGS

    published = KNOWN_CONFIGS["Qwen/Qwen2-Audio-7B-Instruct"]
    return {
        "audio_config": published["audio_config"],
        "text_config": {**published["text_config"], **SMALLER_DECODER[shape]},
    }


def random_model(folder: Path, device: str, dtype):
    """Random weights of the folder's config.json, built directly on ``device`` (no checkpoint written or read)."""
    import torch
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

    raw = json.loads((folder / "config.json").read_text())
    with torch.device(device):
        model = Qwen2AudioForConditionalGeneration._from_config(
            Qwen2AudioConfig(**{k: v for k, v in raw.items() if k not in ("model_type", "architectures")}), dtype=dtype
        )
    model.config._name_or_path = str(folder)
    return model


def clips(folder: Path, count: int) -> list:
    """``count`` 30 s clips of noise at 16 kHz (the processor's rate: nothing to resample), as samples."""
    import numpy as np
    import soundfile as sf

    from autagent.data.sample import Sample

    rng, out = np.random.default_rng(0), []
    for i in range(count):
        path = folder / f"clip{i}.wav"
        sf.write(path, (0.1 * rng.standard_normal(16000 * 30)).astype("float32"), 16000)
        out.append(
            Sample(
                id=f"s{i}", audio=str(path), question=f"What is the tempo of clip {i}?", choices=("a", "b"), answer="a"
            )
        )
    return out


def one_run(name: str, device: str, work: Path) -> dict:
    import dataclasses

    import torch

    from autagent.config import load_config
    from autagent.policies.lm.plan.arithmetic import CURRENT
    from autagent.policies.lm.trainer import build_grpo_trainer, weight_dtype

    run = RUNS[name]
    if run.get("deepspeed"):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    folder = model_folder(run["shape"], work / "model")
    overrides = {**settings(run, device), "policy.lm.model_id": str(folder), "output_dir": str(work)}
    config = load_config(config_file(name), overrides)
    lm = config.policy.lm
    dtype = weight_dtype(lm, deepspeed=bool(lm.deepspeed))
    torch.manual_seed(0)
    model = random_model(folder, device, dtype)  # built where it trains
    if config.grpo.beta > 0 and lm.lora is None:  # TRL loads the reference model from the policy's folder
        model.save_pretrained(folder, state_dict={k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
    prompts = lm.per_device_train_batch_size * lm.gradient_accumulation_steps // config.grpo.group_size
    samples = clips(work, prompts)
    rewards = lambda prompts, completions, **_: [float(len(c) % 3) for c in completions]  # noqa: E731
    trainer, processor = build_grpo_trainer(
        config, lm, samples, {s.id: None for s in samples}, [rewards], work / "trainer", SIX, str(folder), model=model
    )
    trainer.autagent_lm = lm
    meter, timings, steps = PhaseMeter(device == "cuda"), [], []
    instrument(trainer, meter, timings, steps)
    started = time.perf_counter()
    trainer.train()
    result = {"run": name, "train_s": round(time.perf_counter() - started, 1), "rollouts": timings, "steps": steps}
    # what the plan needs to replan this run later, whatever the code then: its settings and this code's runtime
    result.update(config=str(config_file(name).relative_to(ROOT)), settings=settings(run, device))
    result["runtime"] = dataclasses.asdict(CURRENT)
    prompt_tokens = max(t["prompt_tokens"] for t in timings)
    result["phases"] = meter.rounded()
    replan(name, result, config)
    result["floor_ms"] = decode_floor(model, lm, prompt_tokens) if device == "cuda" else None
    if run["shape"] == "tiny":
        result["checks"] = tiny_checks(trainer, processor, samples, config, work)
    return result


def replan(name: str, result: dict, config=None) -> dict:
    """Set each measured phase's ``plan_gb``: ``autagent plan``'s figure (:func:`meter_peak`) for the run's
    recorded settings, the measured prompt length and the runtime of the code it ran."""
    from autagent.policies.lm.plan.arithmetic import BEFORE_MERGED_SAMPLING, Runtime, plan_of, setup_of

    if config is None:
        config = run_config(name, Path(tempfile.mkdtemp(prefix="gpu-check-shape-")), result.get("settings"))
    runtime = Runtime(**result["runtime"]) if result.get("runtime") else BEFORE_MERGED_SAMPLING
    plan = plan_of(setup_of(config, max(t["prompt_tokens"] for t in result["rollouts"]), runtime))
    deepspeed = bool(config.policy.lm.deepspeed)
    for key, figures in result["phases"].items():
        step, phase = int(key.split("/")[0]), key.split("/")[1]
        figures["plan_gb"] = round(meter_peak(plan, step, phase, deepspeed) / 1e9, 2)
    return result


def run_config(name: str, folder: Path, recorded: dict | None = None):
    """A run's config with its model given by shapes alone (config.json: all the plan reads): the
    settings the run recorded, or for a record without them (the runs at 5def832) today's."""
    from autagent.config import load_config

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_audio", **shapes_of(RUNS[name]["shape"])}))
    overrides = {**(recorded or settings(RUNS[name], "cuda")), "policy.lm.model_id": str(folder)}
    return load_config(config_file(name), overrides)


def markdown(results: dict, commit: str) -> str:
    lines = [
        f"Written by `make gpu-check` at commit {commit}.",
        "",
        "| run | card | phase (step) | measured GB | plan GB | plan vs measured | reserved GB | card GB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        card = (r.get("floor_ms") or {}).get("card", r.get("device", "?"))
        if "error" in r:
            lines.append(f"| {name} | {card} | failed: {r['error'][:120]} | | | | | |")
            continue
        if r["phases"] and max(v["measured_gb"] for v in r["phases"].values()) < 0.5:
            lines.append(f"| {name} | {card} | all under 0.5 GB: the allocator's granularity, not compared | | | | | |")
            continue
        for key, v in sorted(r["phases"].items()):
            step, phase = key.split("/")
            if RUNS.get(name, {}).get("deepspeed"):  # the engine steps inside the last backward: see meter_peak
                phase = {"update": "update + step", "optimizer": "after the step"}.get(phase, phase)
            miss = 100 * (v["plan_gb"] / v["measured_gb"] - 1) if v["measured_gb"] else float("nan")
            extra = " | ".join(f"{v[k]:.2f}" if k in v else "-" for k in ("reserved_gb", "card_gb"))
            lines.append(
                f"| {name} | {card} | {phase} ({step}) | {v['measured_gb']:.2f} | {v['plan_gb']:.2f} | {miss:+.1f} % "
                f"| {extra} |"
            )
    lines += [
        "",
        "| run | step | ms per decoding step (prefill included) | floor: weights / + KV cache | seconds a step |",
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        seconds = {s["step"]: s["seconds"] for s in r.get("steps", [])}
        for t in r.get("rollouts", []):
            ms = 1e3 * t["seconds"] / max(1, t["chunks"] * t["decoding_steps"])
            floor = r.get("floor_ms") or {}
            lines.append(
                f"| {name} | {t['step']} | {ms:.1f} | {floor.get('weights_ms', '-')} / {floor.get('with_kv_ms', '-')} "
                f"| {seconds.get(t['step'], '-')} |"
            )
    checks = {n: r["checks"] for n, r in results.items() if r.get("checks")}
    lines += ["", *(f"* {n}: {json.dumps(c)}" for n, c in checks.items())]
    return "\n".join(lines)


def publish(results: dict, commit: str | None = None) -> None:
    """Merge into the runs on record (:data:`RESULTS`) and rewrite the table between the markers of
    docs/cluster.md."""
    merged = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    merged.update(results)
    RESULTS.write_text(json.dumps(merged, indent=2) + "\n")
    commit = (
        commit
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    text = DOC.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        DOC.write_text(head + BEGIN + "\n" + markdown(merged, commit or "?") + "\n" + END + rest.split(END, 1)[1])
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu_check.json").write_text(json.dumps(merged, indent=2))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a single run in this process (the parent's child)
    parser.add_argument("--no-publish", action="store_true", help="print the results, write nothing")
    parser.add_argument("--run-timeout", type=float, default=540.0, help="seconds a run may take, then failed")
    parser.add_argument("--commit", help="the commit measured, for the table (a copied tree may have no git)")
    parser.add_argument("--replan", action="store_true", help="no GPU: recompute the runs on record's plan figures")
    args = parser.parse_args(argv)
    import torch

    if args.replan:  # after a change to the plan: the measured peaks stay, the plan's figures are redone
        stored = json.loads(RESULTS.read_text())
        for name, result in stored.items():
            if result.get("phases") and RUNS[name]["shape"] != "tiny":
                replan(name, result)
        RESULTS.write_text(json.dumps(stored, indent=2) + "\n")
        commits = sorted({r.get("commit") or "?" for r in stored.values()})
        publish({}, ", ".join(commits))
        return 0

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device here (torch {torch.__version__}); nothing measured, nothing written.")
        return 0
    if args.one:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
            result = one_run(args.one, args.device, Path(work))
        print("GPU_CHECK_RESULT " + json.dumps(result), flush=True)
        return 0
    import importlib.util

    results = {}
    for name in [n for n in args.runs.split(",") if n]:
        if RUNS[name].get("deepspeed") and importlib.util.find_spec("deepspeed") is None:
            results[name] = {"run": name, "error": "DeepSpeed is not installed here"}
            continue
        if args.device == "cpu" and RUNS[name]["shape"] != "tiny":
            results[name] = {"run": name, "error": f"the {RUNS[name]['shape']} shapes are for a GPU"}
            continue
        results[name] = {**child_run(name, args.device, args.run_timeout), "device": args.device}
        print(
            f"gpu-check {name}: {'failed: ' + results[name]['error'] if 'error' in results[name] else 'done'}",
            flush=True,
        )
        if not (args.no_publish or args.device == "cpu"):
            publish(
                {name: {**results[name], "commit": args.commit}}, args.commit
            )  # after each run: a later run that hangs or crashes loses nothing
    if args.no_publish or args.device == "cpu":
        print(json.dumps(results, indent=2))
    return 0


def child_run(name: str, device: str, timeout: float) -> dict:
    """One run in its own process (a crashed or hung run cannot take the others with it); its stderr's
    tail is kept in $OUT/gpu_check.log where the device tool brings files back."""
    command = [sys.executable, __file__, "--one", name, "--device", device]
    try:
        child = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=timeout)
        stdout, stderr = child.stdout, child.stderr
    except subprocess.TimeoutExpired as stopped:
        stdout, stderr = stopped.stdout or "", (stopped.stderr or "") + f"\nstopped after {timeout:.0f} s"
        stdout, stderr = [s.decode(errors="replace") if isinstance(s, bytes) else s for s in (stdout, stderr)]
    if os.environ.get("OUT"):
        with open(Path(os.environ["OUT"], "gpu_check.log"), "a") as log:
            log.write(f"==== {name}\n" + "\n".join(stderr.splitlines()[-150:]) + "\n")
    found = [line for line in stdout.splitlines() if line.startswith("GPU_CHECK_RESULT ")]
    if found:
        return json.loads(found[-1].split(" ", 1)[1])
    return {"run": name, "error": (stderr.strip().splitlines() or ["no output"])[-1]}


if __name__ == "__main__":
    sys.exit(main())

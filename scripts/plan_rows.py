#!/usr/bin/env python
"""The memory plan against every GPU run on record: the measured rows, the plan's figure for each, the
fitted terms refitted from them, and the misses in-sample and with each run left out.

The measured rows are generated, never typed: from ``autagent/policies/lm/plan/gpu_check.json``
(``make gpu-check``'s runs, each with the settings and the runtime it recorded, or for the runs at
5def832, which recorded neither, gpu_check's settings and
:data:`autagent.policies.lm.plan.arithmetic.BEFORE_MERGED_SAMPLING`) and from
``tests/data/issue33_h100.md`` (issue #33's table, cut from ``issues show 33`` unchanged: main
64bb085 on one H100).  Each row is planned with its run's settings as a run config.

``python scripts/plan_rows.py`` prints every row with its misses and the fitted terms' values.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ISSUE33 = ROOT / "tests" / "data" / "issue33_h100.md"
GRID = 0.05
"""A fitted term's resolution (GB, or a factor's step)."""
STEPS = 60
"""Factors tried: 1 to 3.95."""
ISSUE33_SETTINGS = {
    # The table's heading, as settings of experiments/paper_qwen2audio.yaml: one process, no DeepSpeed, bf16
    # weights as loaded then (MAIN_64BB085), gradient checkpointing, G 6, 8 rows x 3 micro-batches, chunks of 8,
    # 256-token completions; main's rollout was Qwen2-Audio's generate (logits at every position, dynamic cache);
    # the rewards were a function (no reasoner on the GPU).
    "launcher": {"kind": "python"},
    "reasoner.kind": "openai",
    "policy.lm.deepspeed": None,
    "policy.lm.bf16": True,
    "policy.lm.gradient_checkpointing": True,
    "policy.lm.per_device_train_batch_size": 8,
    "policy.lm.gradient_accumulation_steps": 3,
    "policy.lm.generation_batch_size": 8,
    "policy.lm.max_completion_length": 256,
    "policy.lm.rollout": {"prompt_logits": "all", "cache": "dynamic"},
    "grpo.group_size": 6,
}
ISSUE33_PROMPT_TOKENS = 1520  # "prompts 1,517-1,520 tokens, clip included"
ISSUE33_COLUMNS = {
    "sampling": "sampling",
    "ref log-probs + rewards": "rewards",
    "update micro-batch": "update",
    "optimizer step": "optimizer",
    "allocated between steps": "between",
}


@dataclass
class Run:
    name: str
    config: object
    prompt_tokens: int
    runtime: object
    deepspeed: bool
    source: str
    phases: dict = field(default_factory=dict)
    """(step, phase) -> the record's figures: measured_gb, and where recorded reserved_gb, card_gb."""

    @functools.cached_property
    def setup(self):
        """The plan's inputs for this run (its config, measured prompt length and runtime)."""
        from autagent.policies.lm.plan.arithmetic import setup_of

        return setup_of(self.config, self.prompt_tokens, self.runtime)


@functools.lru_cache(maxsize=1)
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_check_runs(records: dict | None = None) -> list[Run]:
    """The compared runs of gpu_check.json (the tiny ones sit below the allocator's granularity)."""
    from autagent.policies.lm.plan.arithmetic import BEFORE_MERGED_SAMPLING, Runtime

    check = gpu_check()
    records = records if records is not None else json.loads(check.RESULTS.read_text())
    out = []
    for name, record in records.items():
        if "error" in record or not record.get("phases") or check.RUNS.get(name, {}).get("shape") == "tiny":
            continue
        config = check.run_config(name, shapes_folder(name), record.get("settings"))
        runtime = Runtime(**record["runtime"]) if record.get("runtime") else BEFORE_MERGED_SAMPLING
        phases = {(int(key.split("/")[0]), key.split("/")[1]): figures for key, figures in record["phases"].items()}
        tokens = max(t["prompt_tokens"] for t in record["rollouts"])
        deepspeed = bool(config.policy.lm.deepspeed)
        source = f"gpu_check.json at {record.get('commit') or '?'}"
        out.append(Run(name, config, tokens, runtime, deepspeed, source, phases))
    return out


def shapes_folder(key: str) -> Path:
    """Where a run's model shapes (the ``config.json`` the plan reads) are written: one fixed folder per run or
    shape under the temporary directory, rewritten with the same content on every call (a fresh ``mkdtemp``
    per call left 40 folders behind on every test run)."""
    return Path(tempfile.gettempdir()) / "autagent-plan-rows" / key


def issue33_runs(text: str | None = None) -> list[Run]:
    """Issue #33's two runs from its table: a cell is a phase's peak in GB, in the step it names ("(step
    2)") or else in the run's last step (the largest step the row names, 1 if none)."""
    from autagent.config import load_config
    from autagent.policies.lm.plan.arithmetic import MAIN_64BB085

    check = gpu_check()
    lines = [line for line in (text or ISSUE33.read_text()).splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    out = []
    for line in lines[2:]:
        cells = dict(zip(header, (cell.strip() for cell in line.strip("|").split("|"))))
        size = re.match(r"([\d.]+) B", cells["model"]).group(1)
        shape = {"2.09": "2b", "8.40": "7b"}[size]
        folder = shapes_folder(shape)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_audio", **check.shapes_of(shape)}))
        beta = float(cells["β"])
        overrides = {**ISSUE33_SETTINGS, "grpo.beta": beta, "policy.lm.model_id": str(folder)}
        config = load_config(ROOT / "experiments" / "paper_qwen2audio.yaml", overrides)
        named = [int(s) for column in ISSUE33_COLUMNS for s in re.findall(r"\(step (\d)", cells[column])]
        last = max(named, default=1)
        phases = {}
        for column, phase in ISSUE33_COLUMNS.items():
            for gb, step in re.findall(r"\*{0,2}(\d+\.\d+)\*{0,2}(?: \(step (\d)[^)]*\))?", cells[column]):
                phases[(int(step) if step else last, phase)] = {"measured_gb": float(gb)}
        source = "issue #33's table (main 64bb085)"
        out.append(Run(f"issue33-{size}B", config, ISSUE33_PROMPT_TOKENS, MAIN_64BB085, False, source, phases))
    return out


@functools.lru_cache(maxsize=1)
def runs() -> tuple:
    """Every run on record."""
    return tuple(issue33_runs() + gpu_check_runs())


def planned(run: Run, fitted: dict | None = None, margin: bool = True) -> dict:
    """(step, phase) -> the plan's GB for each measured phase of ``run`` (as the meter measures it:
    ``gpu_check.meter_peak``)."""
    from autagent.policies.lm.plan.arithmetic import GB, plan_of

    plan, check = plan_of(run.setup, fitted, margin), gpu_check()
    return {(step, phase): check.meter_peak(plan, step, phase, run.deepspeed) / GB for step, phase in run.phases}


def misses(run: Run, fitted: dict | None = None) -> dict:
    """(step, phase) -> (plan / measured - 1) in %: negative where the plan is below the card."""
    plan = planned(run, fitted)
    return {key: 100 * (plan[key] / v["measured_gb"] - 1) for key, v in run.phases.items()}


def fit(on: list[Run]) -> dict:
    """Each fitted term's value from the runs ``on``, phase by phase in :data:`autagent.policies.lm.plan.terms.FITTED`'s
    order (a phase fitted later sees the earlier ones in place), without the margin
    (:data:`autagent.policies.lm.plan.terms.MARGIN_GB`).  A phase's allowance (GB, added to every moment of the
    phase) is the smallest multiple of :data:`GRID` that puts the plan at or above every measured row
    of the phase; where the phase also has a factor, each multiple of :data:`GRID` from 1 is tried with
    its allowance, and the pair with the least total excess over the rows is kept.  A term with no row
    to fit keeps its floor (0, or 1 for a factor)."""
    from autagent.policies.lm.plan.terms import FITTED

    values = {name: (1.0 if "factor" in name else 0.0) for name in FITTED}
    for phase in dict.fromkeys(term.rows for term in FITTED.values()):
        names = [name for name, term in FITTED.items() if term.rows == phase]
        allowance = next(name for name in names if "factor" not in name)
        factor = next((name for name in names if "factor" in name), None)
        rows = [(run, key) for run in on for key in run.phases if key[1] == phase]
        best = None
        for k in [round(1.0 + i * GRID, 2) for i in range(STEPS)] if factor else [None]:
            trial = {**values, allowance: 0.0, **({factor: k} if factor else {})}
            short = [run.phases[key]["measured_gb"] - planned(run, trial, margin=False)[key] for run, key in rows]
            trial[allowance] = round(math.ceil(round(max([0.0, *short]) / GRID, 6)) * GRID, 2)
            excess = sum(trial[allowance] - gap for gap in short)
            if best is None or excess < best[0] - 1e-9:
                best = (excess, trial)
        values = best[1]
    return values


def leave_one_out() -> dict:
    """run -> its misses with every term refitted on the other runs (the plan as it would have been
    without that run's measurements)."""
    every = runs()
    return {run.name: misses(run, fit([r for r in every if r is not run])) for run in every}


def main() -> int:
    from autagent.policies.lm.plan.terms import FITTED

    every = runs()
    values = fit(list(every))
    print("fitted on every run:", values, "(plan_terms.FITTED:", {n: t.gb for n, t in FITTED.items()}, ")")
    held_out = leave_one_out()
    print("| run | phase (step) | measured GB | plan GB | in-sample | held out |")
    print("|---|---|---|---|---|---|")
    for run in every:
        plan, inside = planned(run, values), misses(run, values)
        for key in sorted(run.phases):
            step, phase = key
            print(
                f"| {run.name} | {phase} ({step}) | {run.phases[key]['measured_gb']:.2f} | {plan[key]:.2f} | "
                f"{inside[key]:+.1f} % | {held_out[run.name][key]:+.1f} % |"
            )
    for run in every:
        inside, out = misses(run, values).values(), held_out[run.name].values()
        print(
            f"{run.name}: in-sample {min(inside):+.1f} .. {max(inside):+.1f} %, "
            f"held out {min(out):+.1f} .. {max(out):+.1f} %"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One command for an ablation: every variant of a base config over several seeds, then mean ± std.

A sweep file (``experiments/sweeps/*.yaml``)::

    base: experiments/embedded_main.yaml     # the run config every variant starts from
    seeds: [0, 1, 2]
    output_dir: runs/sweeps/table4
    variants:                                # name -> dotted overrides
      differential-group: {reward.kind: differential, grpo.advantage: group}
      binary-group: {reward.kind: binary, grpo.advantage: group}
    compare: [[differential-group, binary-group]]   # pairs whose policies are compared seed by seed
    also_test:                               # more test sets: each run's plugin evaluated on each, unchanged
      draw7: {data.benchmark.seed: 7, data.benchmark.root: data/embedded_draw7}

A variant may hold ``also_test: {draw7: {...}}``: its own settings on that test set, over the shared ones (the
cost curve for one variant only, say).

Each (variant, seed) is an ordinary run, ``<output_dir>/<variant>-s<seed>/``, trained in its own
process from its resolved config (``<output_dir>/configs/``), so it gives exactly what ``autagent
train`` gives for that config: in one shared process, sentence embeddings memoised by earlier runs
were encoded in other batches, differ in the last bit, and GRPO's sampling amplified that into
results that depended on the order of the runs.  Finished runs are reused with ``--resume``.
``summary.json`` and ``summary.md`` hold, per variant, the trained
policy's test accuracy and average tools as mean ± std over seeds (and each seed's value), the
baselines of the same test split, selection quality, and for each compared pair the share of test
items on which the two policies, trained from the same seed, choose different tools.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from ..config import ConfigError, load_config, save_config
from ..data.labelled import load_labelled
from ..evaluation.harness import METHODS
from ..evaluation.selection_check import check, description_selector
from ..policies.grpo import moved_key
from .sweep_summary import (  # the summary's figures and tables, read from here as before
    _mean_std,
    added_tools_summary,
    compare_lines,
    curve_summary,
    different_selections,
    markdown,
    quoted_figures,
    transfer_summary,
)
from .train import run_started

__all__ = [
    "_mean_std",
    "added_tools_summary",
    "compare_lines",
    "curve_summary",
    "different_selections",
    "markdown",
    "quoted_figures",
    "read_sweep",
    "run_sweep",
    "selection_check",
    "transfer_summary",
]

BASELINES = tuple(m for m in METHODS if m not in ("single", "policy"))  # one row each in a sweep's summary


def read_sweep(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: sweep file not found")
    spec = yaml.safe_load(path.read_text()) or {}
    known = {"base", "seeds", "output_dir", "variants", "compare", "set", "selection_check", "also_test"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown field {unknown[0]}; known: {', '.join(sorted(known))}")
    check = spec.get("selection_check")
    if check is not None and (not isinstance(check, dict) or "queries" not in check):
        raise ConfigError(f"{path}: selection_check must map queries (a JSONL file) and optionally optional (tools)")
    for key in ("base", "seeds", "variants"):
        if key not in spec:
            raise ConfigError(f"{path}: field {key!r} is missing")
    if (
        not isinstance(spec["seeds"], list)
        or len(spec["seeds"]) < 1
        or not all(isinstance(s, int) for s in spec["seeds"])
    ):
        raise ConfigError(f"{path}: seeds must be a list of integers")
    if not isinstance(spec["variants"], dict) or not spec["variants"]:
        raise ConfigError(f"{path}: variants must map names to overrides")
    for a, b in spec.get("compare", []):
        if a not in spec["variants"] or b not in spec["variants"]:
            raise ConfigError(f"{path}: compare names an unknown variant ({a}, {b})")
    also = spec.setdefault("also_test", {}) or {}
    if not isinstance(also, dict) or not all(isinstance(v, dict) for v in also.values()):
        raise ConfigError(f"{path}: also_test must map names to overrides of the test data")
    for name, variant in spec["variants"].items():
        own = (variant or {}).get("also_test") if isinstance(variant, dict) else None
        if own is not None and (not isinstance(own, dict) or not set(own) <= set(also)):
            raise ConfigError(f"{path}: variant {name}: also_test must map names of also_test to overrides")
    for where, overrides in [("set", spec.get("set")), *((f"variant {n}", v) for n, v in spec["variants"].items())]:
        for key in overrides if isinstance(overrides, dict) else ():
            if moved_key(str(key)):
                raise ConfigError(f"{path}: {where}: {key} moved to {moved_key(key)} (the policy that reads it)")
    spec.setdefault("output_dir", f"runs/sweeps/{path.stem}")
    return spec


def also_test_in_own_process(config, name: str, overrides: dict) -> dict:
    """The run's plugin, unchanged, on another test set (``autagent eval`` with ``overrides``) in a fresh
    process, into ``<run>/also/<name>/`` (kept: a finished one is read back).  The run's config is written
    again first: a run finished by an earlier version (a ``--resume`` that adds a test set) may have left
    one in keys this version refuses."""
    out = config.run_dir / "also" / name
    done = out / "metrics.json"
    if not done.exists():
        path = Path(config.output_dir) / "configs" / f"{config.name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_config(config, path)
        command = [sys.executable, "-m", "autagent.cli", "eval", "--config", str(path), "--out", str(out)]
        command += ["--plugin", str(config.run_dir / "plugin")]
        for key, value in overrides.items():
            command += ["--set", f"{key}={json.dumps(value)}"]
        if subprocess.run(command, check=False).returncode != 0:
            raise ConfigError(f"sweep run {config.name}: its evaluation on {name} failed (folder: {out})")
    return json.loads(done.read_text())


def train_in_own_process(config, resume: bool) -> None:
    """``autagent train`` on ``config`` in a fresh Python process (see the module docstring for why); with
    ``resume``, a run that had started (a checkpoint, or an answer table stopped while asking) goes on."""
    path = Path(config.output_dir) / "configs" / f"{config.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_config(config, path)
    command = [sys.executable, "-m", "autagent.cli", "train", "--config", str(path)]
    command += ["--resume"] if resume and run_started(config.run_dir) else []
    if subprocess.run(command, check=False).returncode != 0:
        raise ConfigError(f"sweep run {config.name} failed (its config: {path}; its folder: {config.run_dir})")


def variant_config(spec: dict, name: str, seed: int) -> tuple:
    """(the run config of variant ``name`` at ``seed``, its own settings per extra test set): the sweep's
    ``set``, the variant's overrides (less its ``also_test``), the seed, the run's name and folder."""
    variant = dict(spec["variants"][name] or {})
    own_tests = variant.pop("also_test", None) or {}  # this variant's own settings on a test set
    overrides = {
        **(spec.get("set") or {}),
        **variant,
        "seed": seed,
        "name": f"{name}-s{seed}",
        "output_dir": str(spec["output_dir"]),
    }
    return load_config(spec["base"], overrides), own_tests


def run_sweep(path: str | Path, resume: bool = False, only: str | None = None) -> dict:
    spec = read_sweep(path)
    out = Path(spec["output_dir"])
    names = [n for n in spec["variants"] if not only or n in only.split(",")]
    runs: dict[str, dict[int, dict]] = {}
    for name in names:
        for seed in spec["seeds"]:
            config, own_tests = variant_config(spec, name, seed)
            done = config.run_dir / "metrics.json"
            if not (resume and done.exists()):
                if config.run_dir.exists() and not resume:
                    raise FileExistsError(f"{config.run_dir} exists: pass --resume to reuse finished runs")
                train_in_own_process(config, resume=resume)
            metrics = json.loads(done.read_text())
            also = {
                test: also_test_in_own_process(config, test, {**o, **(own_tests.get(test) or {})})
                for test, o in spec["also_test"].items()
            }
            metrics["also_test"] = {test: m["methods"] for test, m in also.items()}
            metrics["also_test_curves"] = {test: m.get("cost_curve") for test, m in also.items()}
            if spec.get("selection_check"):
                metrics["selection_check"] = selection_check(config.run_dir, spec["selection_check"])
            runs.setdefault(name, {})[seed] = metrics
    summary = {"sweep": str(path), "seeds": spec["seeds"], "variants": {}, "baselines": {}, "compare": []}
    for name, by_seed in runs.items():
        policy = [m["methods"]["policy"] for m in by_seed.values()]
        summary["variants"][name] = {
            "overrides": spec["variants"][name],
            "accuracy": _mean_std([p["accuracy"] for p in policy]),
            "avg_tools": _mean_std([p["avg_tools"] for p in policy]),
            "selection_precision": _mean_std(
                [p["selection"]["precision"] for p in policy if p.get("selection")] or [0.0]
            ),
            "selection_recall": _mean_std([p["selection"]["recall"] for p in policy if p.get("selection")] or [0.0]),
            "no_call_on_hearing_items": _mean_std(
                [p["selection"]["no_call_share_on_hearing_items"] or 0.0 for p in policy if p.get("selection")] or [0.0]
            ),
        }
        summary["variants"][name].update(transfer_summary(by_seed) | added_tools_summary(by_seed))
        summary["variants"][name].update(quoted_figures(by_seed, spec["also_test"]))
        for test in spec["also_test"]:
            tested = [m["also_test"][test]["policy"] for m in by_seed.values()]
            summary["variants"][name][f"also/{test}/accuracy"] = _mean_std([p["accuracy"] for p in tested])
            summary["variants"][name][f"also/{test}/avg_tools"] = _mean_std([p["avg_tools"] for p in tested])
            curves = [(m.get("also_test_curves") or {}).get(test) for m in by_seed.values()]
            if curves and all(curves):
                summary["variants"][name][f"also/{test}/cost_curve"] = curve_summary(curves)
            baselines = next(iter(by_seed.values()))["also_test"][test]
            for baseline in BASELINES:
                if baseline in baselines:
                    summary.setdefault("also_baselines", {}).setdefault(test, {})[baseline] = {
                        "accuracy": baselines[baseline]["accuracy"],
                        "avg_tools": baselines[baseline]["avg_tools"],
                        **{k: baselines[baseline][k] for k in ("tool_seconds",) if k in baselines[baseline]},
                    }
        first = next(iter(by_seed.values()))["methods"]
        for baseline in BASELINES:
            if baseline in first:
                summary["baselines"].setdefault(
                    baseline, {"accuracy": first[baseline]["accuracy"], "avg_tools": first[baseline]["avg_tools"]}
                )
    for a, b in spec.get("compare", []):
        if a in runs and b in runs:
            summary["compare"].append({"pair": [a, b], **different_selections(out, a, b, spec)})
    summary["table"] = markdown(summary)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "summary.md").write_text(summary["table"])
    return summary


def selection_check(run_dir: Path, spec: dict) -> dict:
    """The run's plugin and Tools-with-Descriptions on the labelled transfer questions
    (:mod:`autagent.evaluation.selection_check`), computed once per run into ``selection_check.json``."""
    # looked up when called, not at import: a test patches it on its module
    from ..api import load

    path = run_dir / "selection_check.json"
    if path.exists():
        return json.loads(path.read_text())
    items = load_labelled(spec["queries"], spec.get("audio_dir", ".cache/stand-in-audio"))
    plugin = load(run_dir / "plugin")
    result = check(
        {"policy": plugin.select_many, "tools_desc": description_selector(plugin.tools)},
        items,
        spec.get("optional") or (),
    )
    path.write_text(json.dumps(result, indent=2))
    return result

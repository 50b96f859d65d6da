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
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

from ..config import ConfigError, load_config, save_config
from ..data.labelled import load_labelled
from ..evaluation.harness import METHODS
from ..evaluation.paired import paired_difference
from ..evaluation.selection_check import check, description_selector
from ..policies.grpo import moved_key
from .train import run_started

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


def _mean_std(values: list[float]) -> dict:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": values,
    }


def _policy_rows(run_dir: Path) -> dict[str, tuple[tuple, bool]]:
    """Per item of a run's evaluation: the policy's tools and whether it answered right."""
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    return {r["id"]: (tuple(r["tools"]), bool(r["correct"])) for r in rows if r["method"] == "policy"}


def different_selections(out: Path, a: str, b: str, spec: dict) -> dict:
    """How often variants ``a`` and ``b`` of the same seed select different tools, on the sweep's test split
    (``share_of_items_with_different_selection``) and on each extra test set (``also/<t>/...``), with the
    number of items each share is over (``items``, ``also/<t>/items``): a sweep whose own test split is cut to a
    row says little there and more on its extra test sets.  Per seed also ``a``'s accuracy minus ``b``'s on
    the items both answered, with its exact paired 95 % interval (``paired``: one entry a seed)."""
    result: dict = {}
    for test in ("", *spec["also_test"]):
        prefix, shares, items, paired = (f"also/{test}/" if test else ""), [], 0, []
        for seed in spec["seeds"]:
            left, right = (_policy_rows(out / f"{v}-s{seed}" / prefix) for v in (a, b))
            shares.append(sum(left[k][0] != right.get(k, (None,))[0] for k in left) / max(len(left), 1))
            items = len(left)
            both = [k for k in left if k in right]
            found = paired_difference([right[k][1] for k in both], [left[k][1] for k in both])
            paired.append({"seed": seed, "difference": round(found["difference"], 4), "interval_95": found["interval"]})
        result[f"{prefix}share_of_items_with_different_selection"] = _mean_std(shares)
        result[f"{prefix}items"] = items
        result[f"{prefix}paired"] = paired
    return result


def curve_summary(curves: list[dict]) -> dict:
    """Seeds' accuracy-against-tools curves (:mod:`autagent.evaluation.cost_curve`) as mean ± std per K: the
    plugin's, the fixed order's and their gap (paired by seed), and the threshold's point."""
    out = {
        "plugin": [],
        "fixed_order": [],
        "gap": [],
        "orders": [(c.get("fixed_order") or {}).get("order") for c in curves],
    }
    for k in range(len(curves[0]["plugin"])):
        out["plugin"].append(_mean_std([c["plugin"][k]["accuracy"] for c in curves]))
        if all(c.get("fixed_order") for c in curves):
            out["fixed_order"].append(_mean_std([c["fixed_order"]["points"][k]["accuracy"] for c in curves]))
            out["gap"].append(_mean_std([c["fixed_order"]["gap"][k] for c in curves]))
    if all(c.get("threshold") for c in curves):
        out["threshold"] = {
            "accuracy": _mean_std([c["threshold"]["accuracy"] for c in curves]),
            "avg_tools": _mean_std([c["threshold"]["avg_tools"] for c in curves]),
        }
    return out


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


def run_sweep(path: str | Path, resume: bool = False, only: str | None = None) -> dict:
    spec = read_sweep(path)
    out = Path(spec["output_dir"])
    names = [n for n in spec["variants"] if not only or n in only.split(",")]
    runs: dict[str, dict[int, dict]] = {}
    for name in names:
        for seed in spec["seeds"]:
            variant = dict(spec["variants"][name] or {})
            own_tests = variant.pop("also_test", None) or {}  # this variant's own settings on a test set
            overrides = {
                **(spec.get("set") or {}),
                **variant,
                "seed": seed,
                "name": f"{name}-s{seed}",
                "output_dir": str(out),
            }
            config = load_config(spec["base"], overrides)
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


def quoted_figures(by_seed: dict, tests) -> dict:
    """What prose about a sweep quotes, recorded so that it can come from a record: the policy's accuracy
    per domain (the test split's, ``by_domain/<d>``, and each extra test set's, ``also/<t>/by_domain/<d>``),
    cross-validation's held-out reward of the candidate it chose and that candidate, per seed, and the
    digests of the benchmark the runs were trained and tested on (metrics.json's ``data_digest``)."""
    out: dict = {}
    policies = {"": [m["methods"]["policy"] for m in by_seed.values()]}
    policies |= {f"also/{t}/": [m["also_test"][t]["policy"] for m in by_seed.values()] for t in tests}
    for prefix, runs in policies.items():
        for domain in sorted({d for p in runs for d in p.get("by_domain") or {}}):
            values = [p["by_domain"][domain] for p in runs if domain in (p.get("by_domain") or {})]
            if len(values) == len(runs):
                out[f"{prefix}by_domain/{domain}"] = _mean_std(values)
    found = [(m.get("training") or {}).get("crossval") for m in by_seed.values()]
    if found and all(found):
        chosen = [next(c for c in f["candidates"] if c["candidate"] == f["chosen"]) for f in found]
        out["crossval/held_out_reward"] = _mean_std([c["reward"] for c in chosen])
        out["crossval/chosen"] = [f["chosen"] for f in found]
    for prefix, runs in policies.items():  # each seed's paired difference to All-Tools and its tool-seconds
        if all("vs_all_tools" in p for p in runs):
            out[f"{prefix}vs_all_tools"] = [
                {
                    "seed": seed,
                    "difference": p["vs_all_tools"]["difference"],
                    "interval_95": p["vs_all_tools"]["interval_95"],
                }
                for seed, p in zip(by_seed, runs)
            ]
        if all("tool_seconds" in p for p in runs):
            out[f"{prefix}tool_seconds"] = _mean_std([p["tool_seconds"]["serial"] for p in runs])
    certificates = [(m.get("training") or {}).get("certificate") for m in by_seed.values()]
    if certificates and all(certificates):
        keep = (
            "label",
            "point",
            "certified",
            "eps",
            "n",
            "difference",
            "lower_bound",
            "accuracy",
            "all_tools_accuracy",
        )
        out["certificates"] = [{"seed": seed} | {k: c[k] for k in keep} for seed, c in zip(by_seed, certificates)]
    digests = sorted({m.get("data_digest") for m in by_seed.values()} - {None})
    if digests:
        out["data_digest"] = digests
    return out


def transfer_summary(by_seed: dict) -> dict:
    """Mean ± std over seeds of the transfer check, for the policy and Tools-with-Descriptions."""
    checks = [m["selection_check"] for m in by_seed.values() if "selection_check" in m]
    if not checks:
        return {}
    out = {}
    for selector in ("policy", "tools_desc"):
        for how in ("all_labels", "optional_exempt"):
            for key in ("precision", "recall", "f1", "calls_per_item", "no_tool_items_left_toolless"):
                values = [c[selector][how][key] for c in checks if c[selector][how][key] is not None]
                out[f"transfer/{selector}/{how}/{key}"] = _mean_std(values or [0.0])
    return out


def added_tools_summary(by_seed: dict) -> dict:
    """The held-out-tool experiment: with the tools added after training, the policy's accuracy, and
    each added tool's recall on the test items that need it (mean ± std over seeds)."""
    runs = [m["added_tools"] for m in by_seed.values() if "added_tools" in m]
    if not runs:
        return {}
    out = {"added/accuracy": _mean_std([r["methods"]["policy"]["accuracy"] for r in runs])}
    for tool in runs[0]["tools"]:
        rows = [r["methods"]["policy"]["selection"]["per_tool"].get(tool, {}) for r in runs]
        out[f"added/{tool}/recall"] = _mean_std([row.get("recall") or 0.0 for row in rows])
        out[f"added/{tool}/precision"] = _mean_std([row.get("precision") or 0.0 for row in rows])
        out[f"added/{tool}/calls"] = _mean_std([float(row.get("called") or 0) for row in rows])
    return out


def pm(stat: dict, scale: float = 100.0, digits: int = 1) -> str:
    """A mean ± std statistic of :func:`_mean_std`, scaled (percent by default), for the summary's tables."""
    return f"{scale * stat['mean']:.{digits}f} ± {scale * stat['std']:.{digits}f}"


def markdown(summary: dict) -> str:
    lines = [
        f"# {summary['sweep']} (seeds {summary['seeds']}; policy on the test split, mean ± std over seeds)",
        "",
        "| variant | accuracy | avg tools | tool precision | tool recall | no call on hearing items "
        "| per-seed accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, v in summary["variants"].items():
        seeds = ", ".join(f"{100 * x:.1f}" for x in v["accuracy"]["values"])
        lines.append(
            f"| {name} | {pm(v['accuracy'])} | {pm(v['avg_tools'], 1.0, 2)} | {pm(v['selection_precision'])} | "
            f"{pm(v['selection_recall'])} | {pm(v['no_call_on_hearing_items'])} | {seeds} |"
        )
    if summary["baselines"]:
        lines += ["", "| baseline (same test split) | accuracy | avg tools |", "|---|---|---|"]
        lines += [
            f"| {k} | {100 * b['accuracy']:.1f} | {b['avg_tools']:.2f} |" for k, b in summary["baselines"].items()
        ]
    for test, baselines in (summary.get("also_baselines") or {}).items():
        lines += ["", f"On {test} (each plugin unchanged; mean ± std over seeds):", ""]
        lines += ["| variant or baseline | accuracy | avg tools |", "|---|---|---|"]
        for name, v in summary["variants"].items():
            lines.append(f"| {name} | {pm(v[f'also/{test}/accuracy'])} | {pm(v[f'also/{test}/avg_tools'], 1.0, 2)} |")
        lines += [f"| {k} | {100 * b['accuracy']:.1f} | {b['avg_tools']:.2f} |" for k, b in baselines.items()]
    transfer = {n: v for n, v in summary["variants"].items() if "transfer/policy/all_labels/f1" in v}
    if transfer:
        lines += [
            "",
            "Transfer check (labelled questions from other benchmarks; precision / recall / F1 of the tools "
            "called, and no-tool items left toolless):",
            "",
            "| variant | selector | labels | precision | recall | F1 | calls per item | no-tool items toolless |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, v in transfer.items():
            for selector in ("policy", "tools_desc"):
                for how in ("all_labels", "optional_exempt"):
                    key = f"transfer/{selector}/{how}/"
                    lines.append(
                        f"| {name} | {selector} | {how} | {pm(v[key + 'precision'])} | {pm(v[key + 'recall'])} | "
                        f"{pm(v[key + 'f1'], 1.0, 3)} | {pm(v[key + 'calls_per_item'], 1.0, 2)} | "
                        f"{pm(v[key + 'no_tool_items_left_toolless'])} |"
                    )
    added = {n: v for n, v in summary["variants"].items() if "added/accuracy" in v}
    if added:
        lines += [
            "",
            "Tools added after training (recall on the test items that need them):",
            "",
            "| variant | accuracy, trained tools | accuracy, tools added | added tool: recall | precision | calls |",
            "|---|---|---|---|---|---|",
        ]
        for name, v in added.items():
            tools = [k.split("/")[1] for k in v if k.startswith("added/") and k.endswith("/recall")]
            cells = [
                ", ".join(f"{t} {pm(v[f'added/{t}/{key}'], scale, digits)}" for t in tools)
                for key, scale, digits in (("recall", 100.0, 1), ("precision", 100.0, 1), ("calls", 1.0, 0))
            ]
            lines.append(f"| {name} | {pm(v['accuracy'])} | {pm(v['added/accuracy'])} | {' | '.join(cells)} |")
    lines += compare_lines(summary["compare"])
    return "\n".join(lines) + "\n"


def _paired_cell(entry: dict) -> str:
    low, high = entry["interval_95"]
    return f"s{entry['seed']} {100 * entry['difference']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def compare_lines(compare: list[dict]) -> list[str]:
    """The compared pairs' table: the share of items where they select differently, per test set."""
    if not compare:
        return []
    also = [k.split("/")[1] for k in compare[0] if k.startswith("also/") and k.endswith("/items")]
    prefixes = ["", *(f"also/{t}/" for t in also)]
    head = " | ".join(["on the test split", *(f"on {t}" for t in also)])
    lines = ["", f"| items where the two policies select differently (same seed) | {head} |"]
    lines += ["|---|" + "---|" * len(prefixes)]
    for c in compare:
        cells = [f"{pm(c[p + 'share_of_items_with_different_selection'])} % of {c[p + 'items']}" for p in prefixes]
        lines.append(f"| {c['pair'][0]} vs {c['pair'][1]} | {' | '.join(cells)} |")
    lines += ["", f"| accuracy of the first minus the second, per seed [paired 95 % interval] | {head} |"]
    lines += ["|---|" + "---|" * len(prefixes)]
    for c in compare:
        cells = ["; ".join(_paired_cell(e) for e in c.get(p + "paired", [])) for p in prefixes]
        lines.append(f"| {c['pair'][0]} vs {c['pair'][1]} | {' | '.join(cells)} |")
    return lines

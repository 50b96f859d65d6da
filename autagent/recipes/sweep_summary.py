"""A sweep's summary (:mod:`.sweep`): each variant's figures as mean ± std over seeds (accuracy, tools,
selection quality, transfer, added tools, the quoted figures, cost curves), how often two variants' policies
select differently with their paired intervals, and ``summary.md``'s tables."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..evaluation.paired import paired_difference


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

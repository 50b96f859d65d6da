"""The back-off's trade-off as its cut moves: precision, recall, F1 and empty selections on a labelled
question set, per offset of the zero-shot head, for both rules, over plugins with a back-off.

    .venv/bin/python scripts/backoff_curve.py --plugin runs/backoff/s0_fill --plugin runs/backoff/s1_fill ...

Each plugin's router, head and familiarity are its own; only the offset b moves (the calibrated one is
marked).  Tools named ``--optional`` are exempt, as in ``check-selection``.  Prints one markdown table
(mean ± std over the plugins), and with ``--out`` writes every plugin's curve as JSON.  It measures; it
never sets a cut (calibration reads ``experiments/transfer/calibration.jsonl``, never this set).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autagent.api import load  # noqa: E402
from autagent.data.labelled import load_labelled  # noqa: E402
from autagent.policies.router.backoff import OFFSETS, RULES, selection_scores  # noqa: E402

KEYS = ("precision", "recall", "f1", "empty_on_tool_items")


def curves(plugin_dir: str, items, optional) -> dict:
    """rule -> offset -> scores, and the plugin's own calibrated offset; the router alone as ``router``."""
    plugin = load(plugin_dir)
    if plugin.backoff is None:
        raise SystemExit(f"{plugin_dir}: this plugin has no back-off (autagent plugin backoff adds one)")
    backoff, head = plugin.backoff
    features = plugin.featurizer.of_samples([item.sample for item in items])
    parts = backoff.decide(plugin.router, head, features, plugin.descriptions)
    tools = plugin.learned_tools
    labels = torch.tensor([[float(t in item.tools) for t in tools] for item in items])
    counted = torch.tensor([t not in optional for t in tools])
    out = {"offset": float(backoff.offset), "router": selection_scores(parts.router_selection, labels, counted)}
    out["unfamiliar_share"] = float(parts.unfamiliar.float().mean())
    calibrated_rule = backoff.config.rule
    for rule in RULES:
        backoff.config.rule = rule
        out[rule] = {b: selection_scores(backoff.select(parts, b), labels, counted) for b in OFFSETS}
    backoff.config.rule = calibrated_rule
    return out


def spread(values) -> str:
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * mean:.1f} ± {100 * std:.1f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plugin", action="append", required=True, help="a plugin with a back-off (repeat)")
    parser.add_argument("--queries", default="experiments/transfer/questions.jsonl")
    parser.add_argument("--optional", nargs="*", default=["sound_events"])
    parser.add_argument("--audio-dir", default=".cache/stand-in-audio")
    parser.add_argument("--out", help="write every plugin's curves here (JSON)")
    args = parser.parse_args(argv)
    items = load_labelled(args.queries, args.audio_dir)
    runs = {path: curves(path, items, set(args.optional)) for path in args.plugin}
    offsets = sorted(run["offset"] for run in runs.values())
    print(f"{args.queries}: {len(items)} items, {', '.join(args.optional) or 'no'} tools optional; calibrated offsets "
          f"{offsets}; unfamiliar share {spread([r['unfamiliar_share'] for r in runs.values()])} %\n")  # fmt: skip
    print("| rule | offset b | precision | recall | F1 (×100) | empty on items needing a tool |")
    print("|---|---|---|---|---|---|")
    row = [spread([r["router"][k] for r in runs.values()]) for k in KEYS]
    print(f"| router alone (today) | – | {' | '.join(row)} |")
    for rule in RULES:
        for b in OFFSETS:
            row = [spread([r[rule][b][k] for r in runs.values()]) for k in KEYS]
            print(f"| {rule} | {b:+.2f} | {' | '.join(row)} |")
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

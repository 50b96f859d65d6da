"""Where should a router plugin's greedy selection cut?  Prints, for each plugin and each cut, the
accuracy, tools per query and reward on dev and test, and the transfer check's precision and recall.

A router calls a tool when its probability is above 0.5.  A higher cut trades recall for precision;
this measures the trade, choosing nothing itself (the cut that dev's reward prefers is the honest
one; test and the transfer set are only reported).  docs/results/headline.md, "How wide the question-only gap
can be here", quotes it for the five plugins of ``experiments/sweeps/tool_credit.yaml``::

    .venv/bin/python scripts/selection_threshold.py runs/sweeps/tool_credit/tool-credit-s*/plugin
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plugins", nargs="+", help="router plugin directories")
    parser.add_argument("--config", default="experiments/embedded_main.yaml", help="the plugins' experiment")
    parser.add_argument("--cuts", default="0.5,0.55,0.6,0.65,0.7", help="probability cuts, comma-separated")
    parser.add_argument("--queries", default="experiments/transfer/questions.jsonl", help="the transfer check's set")
    parser.add_argument("--optional", default="sound_events", help="tools optional in the transfer check")
    args = parser.parse_args(argv)

    import numpy as np

    from autagent.api import load
    from autagent.config import load_config
    from autagent.data.labelled import load_labelled
    from autagent.evaluation.harness import run_method
    from autagent.evaluation.selection_check import score
    from autagent.reasoners import build_reasoner
    from autagent.recipes.run import load_splits, tool_records

    config = load_config(args.config)
    config.tools.executor = "local"  # the records come from the tool cache; no actors needed for them
    cuts = [float(c) for c in args.cuts.split(",")]
    splits = load_splits(config)
    reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
    labelled = load_labelled(args.queries, ".cache/stand-in-audio")
    optional = [t for t in args.optional.split(",") if t]
    plugins = [load(p, check_installed_tools=False) for p in args.plugins]

    def probabilities(plugin, samples):
        return plugin.router.tool_probabilities(plugin.featurizer.of_samples(samples)).detach().numpy()

    def cut(plugin, probs, at):
        return [tuple(t for t, p in zip(plugin.learned_tools, row) if p > at) for row in probs]

    try:
        for name, samples in (("dev", splits.dev), ("test", splits.test)):
            records = tool_records(config, samples)
            base = np.mean(run_method(reasoner, samples, records, [()] * len(samples)).correct)
            for directory, plugin in zip(args.plugins, plugins):
                probs = probabilities(plugin, samples)
                cells = []
                for at in cuts:
                    subsets = cut(plugin, probs, at)
                    accuracy = np.mean(run_method(reasoner, samples, records, subsets).correct)
                    tools = np.mean([len(z) for z in subsets])
                    reward = accuracy - base - config.reward.tool_cost * tools
                    cells.append(f"{at}: acc {100 * accuracy:.1f} tools {tools:.2f} reward {reward:.3f}")
                print(f"{name:8s} {directory}  " + " | ".join(cells), flush=True)
        for directory, plugin in zip(args.plugins, plugins):
            probs = probabilities(plugin, [item.sample for item in labelled])
            cells = []
            for at in cuts:
                result = score(labelled, cut(plugin, probs, at), optional)
                cells.append(f"{at}: P {100 * result['precision']:.1f} R {100 * result['recall']:.1f}")
            print(f"transfer {directory}  " + " | ".join(cells), flush=True)
    finally:
        reasoner.close()


if __name__ == "__main__":
    main()

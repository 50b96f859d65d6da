#!/usr/bin/env python
"""Does tests/test_train.py's learning test hold on other draws of its fixture?  For each fixture seed
(the tiny benchmark drawn with ``data.benchmark.seed``), 40 GRPO steps of the test's router and what the
test may assert: the labelled tools' probability before and after, the other tools', and the sampled
reward of the first and last ten steps.  Prints one JSON line per seed (``--out`` writes them).

Usage: .venv/bin/python scripts/learning_draws.py [--seeds 3 4 5 6 7] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def measure(seed: int, steps: int = 40) -> dict:
    import numpy as np
    import torch
    from helpers.fixtures import tiny_bench

    from autagent.policies.router.answers import AnswerSource
    from autagent.policies.router.config import RouterGRPOConfig
    from autagent.policies.router.features import Featurizer
    from autagent.policies.router.model import Router, RouterConfig
    from autagent.policies.router.train import RouterTrainer
    from autagent.reasoners import CachedReasoner
    from autagent.reasoners.embedded import EmbeddedReasoner, EmbeddedReasonerConfig

    bench = tiny_bench(seed)
    featurizer = Featurizer(RouterConfig())
    samples = bench["train"]
    features = featurizer.of_samples(samples)
    reasoner = CachedReasoner(EmbeddedReasoner(EmbeddedReasonerConfig()), None)
    torch.manual_seed(0)
    policy = Router(featurizer.dim, RouterConfig(), len(bench["tools"]))
    grpo = RouterGRPOConfig(steps=steps, batch_size=8, group_size=6, learning_rate=0.01, beta=0.02, advantage="reward")
    answers = AnswerSource(reasoner, bench["records"], bench["tools"])
    trainer = RouterTrainer(policy, features, samples, answers, grpo)  # the differential reward, free tools, seed 0
    tools = bench["tools"]
    needed = np.zeros((len(samples), len(tools)), dtype=bool)
    for i, s in enumerate(samples):
        needed[i, [tools.index(t) for t in s.meta["tools"]]] = True

    def probabilities():
        p = policy.tool_probabilities(features).detach().numpy()
        return float(p[needed].mean()), float(p[~needed].mean())

    before = probabilities()
    history = trainer.train()
    after = probabilities()
    rewards = [h["reward_mean"] for h in history]
    return {
        "fixture_seed": seed,
        "needed_before": round(before[0], 3),
        "needed_after": round(after[0], 3),
        "other_before": round(before[1], 3),
        "other_after": round(after[1], 3),
        "reward_first10": round(float(np.mean(rewards[:10])), 3),
        "reward_last10": round(float(np.mean(rewards[-10:])), 3),
        "accuracy_first": history[0]["accuracy_sampled"],
        "accuracy_last": history[-1]["accuracy_sampled"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 4, 5, 6, 7])
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        rows.append(measure(seed))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

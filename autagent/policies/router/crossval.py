"""k-fold cross-validation of a router's training settings on its training queries' answer table.

A run against a new reasoner has no settings measured for it: the price a tool call pays in the reward,
the learning rate, the number of steps, the objective.  Choosing them on dev or test items would make
those items training data, so they are chosen here on the training queries alone: the queries are cut
into ``folds`` parts, each candidate is trained on all parts but one and judged on the one left out,
where the table (the reasoner's answers, and its surrogate for subsets never asked) scores the router's
greedy selection without asking the reasoner anything.

The criterion is the held-out mean reward at the *user's* price, ``reward.tool_cost`` (one answer
gained is worth 1, one tool call costs the price): accuracy − no-tool accuracy − price × tools.  The
price a candidate *trains* with may differ (``reward.tool_cost`` in the grid): a higher training price
regularises towards fewer tools.  The best mean is chosen: the user's price is the only preference for
fewer tools.  With ``one_se`` the chosen candidate is instead the one calling fewest tools among those
whose mean is within one standard error of the best (the one-standard-error rule), for a user who
would rather not pay extra calls for a difference smaller than the folds' spread.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from dataclasses import dataclass, field

import numpy as np
import torch

from rewards.scoring import is_correct

from ..grpo import moved_key
from .model import subset_ids

GRID_KEYS = (
    "policy.router.learning_rate",
    "grpo.steps",
    "grpo.beta",
    "policy.router.objective",
    "policy.router.credit",
    "grpo.group_size",
    "reward.tool_cost",
)


@dataclass
class CrossValConfig:
    folds: int = 0
    """Parts the training queries are cut into (0: no cross-validation; the config's settings train)."""
    grid: dict = field(default_factory=dict)
    """Dotted setting -> the values to try, e.g. ``{reward.tool_cost: [0.0, 0.01, 0.05]}``; every
    combination is a candidate (settings: grpo.steps, beta, group_size; policy.router.learning_rate,
    objective, credit; and reward.tool_cost, the training price)."""
    one_se: bool = False
    """Among candidates within one standard error of the best held-out reward, take the one that calls
    fewest tools (False: the best mean; the user's price already says what a call costs)."""
    seed: int = 0
    """How queries are dealt into folds (apart from the run's seed, so every seed sees the same folds)."""

    def __post_init__(self):
        if self.folds == 1 or self.folds < 0:
            raise ValueError(f"policy.router.table.crossval.folds must be 0 (off) or >= 2, got {self.folds}")
        where = "policy.router.table.crossval.grid"
        moved = [k for k in self.grid if moved_key(k)]
        if moved:
            raise ValueError(f"{where}: {moved[0]} moved to {moved_key(moved[0])} (the policy that reads it)")
        bad = [k for k in self.grid if k not in GRID_KEYS]
        if bad:
            raise ValueError(f"{where}: {bad} cannot be cross-validated; settings: {list(GRID_KEYS)}")
        empty = [k for k, v in self.grid.items() if not isinstance(v, list) or not v]
        if empty:
            raise ValueError(f"{where}: {empty} must each map to a non-empty list of values")


def candidates(grid: dict) -> list[dict]:
    """Every combination of the grid's values, as dotted overrides (one empty candidate for no grid)."""
    keys = sorted(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def apply(grpo, tool_cost: float, candidate: dict):
    """(the trainer's :class:`~.config.RouterGRPOConfig`, training price) with a candidate's overrides: every
    grid key but the price names one of its fields (``grpo.beta``, ``policy.router.credit``)."""
    changes = {k.rsplit(".", 1)[1]: v for k, v in candidate.items() if k != "reward.tool_cost"}
    return dataclasses.replace(grpo, **changes), float(candidate.get("reward.tool_cost", tool_cost))


def held_out_figures(selector, features: torch.Tensor, samples, table, tool_ids, price: float) -> dict:
    """Accuracy, tools, reward at ``price`` and the share of answers really asked, of ``selector``'s
    greedy subsets on ``samples``, every answer read from ``table``."""
    chosen = [subset_ids(row, tool_ids) for row in selector.select(features)]
    correct = [float(is_correct(s, table.answer(s.id, z))) for s, z in zip(samples, chosen)]
    base = [float(is_correct(s, table.answer(s.id, ()))) for s in samples]
    tools = [len(z) for z in chosen]
    return {
        "accuracy": float(np.mean(correct)),
        "avg_tools": float(np.mean(tools)),
        "reward": float(np.mean(correct) - np.mean(base) - price * np.mean(tools)),
        "asked": float(np.mean([table.asked(s.id, z) for s, z in zip(samples, chosen)])),
    }


class CrossValidationError(ValueError):
    """Too few training queries to hold any out (a user's budget or data, said in one line by the CLI)."""


def cross_validate(config: CrossValConfig, samples, features, table, train, tool_ids, price: float, bar=None) -> dict:
    """Each candidate of ``config.grid`` over ``config.folds`` folds; ``train(indices, candidate)``
    returns a trained selector (``.select(features)``) for the queries at ``indices``.  Returns every
    candidate's per-fold and mean figures and the chosen candidate."""
    order = np.random.default_rng(config.seed).permutation(len(samples))
    folds = [fold for fold in np.array_split(order, config.folds) if len(fold)]
    if len(folds) < 2:  # a held-out fold would leave nothing to train on
        raise CrossValidationError(
            f"cross-validation needs at least 2 training queries the answer table holds whole, it holds "
            f"{len(samples)}: raise policy.router.table.budget or set policy.router.table.crossval.folds: 0"
        )
    rows = []
    for candidate in candidates(config.grid):
        per_fold = []
        for k, held in enumerate(folds):
            kept = np.concatenate([f for j, f in enumerate(folds) if j != k])
            selector = train(kept, candidate)
            per_fold.append(
                held_out_figures(selector, features[held], [samples[i] for i in held], table, tool_ids, price)
            )
            if bar is not None:
                bar.update(1)
        rewards = [f["reward"] for f in per_fold]
        rows.append(
            {
                "candidate": candidate,
                "reward": statistics.fmean(rewards),
                "reward_se": statistics.stdev(rewards) / len(rewards) ** 0.5 if len(rewards) > 1 else 0.0,
                "accuracy": statistics.fmean(f["accuracy"] for f in per_fold),
                "avg_tools": statistics.fmean(f["avg_tools"] for f in per_fold),
                "asked": statistics.fmean(f["asked"] for f in per_fold),
                "folds": per_fold,
            }
        )
    best = max(rows, key=lambda r: r["reward"])
    chosen = best
    if config.one_se:
        near = [r for r in rows if r["reward"] >= best["reward"] - best["reward_se"]]
        chosen = min(near, key=lambda r: (r["avg_tools"], -r["reward"]))
    return {
        "folds": len(folds),
        "queries": len(samples),
        "price": price,
        "rule": "one standard error, fewest tools" if config.one_se else "best mean",
        "chosen": chosen["candidate"],
        "best": best["candidate"],
        "candidates": rows,
    }

"""Reward functions for tool-selection GRPO, in TRL's reward-function signature.

``reward(prompts, completions, **columns) -> list[float]``: one float per completion.  The
columns they read (lists aligned with ``completions``):

* ``predictions``: the reasoner's reply with the completion's tools (ŷ),
* ``base_predictions``: its reply with no tools (y_base),
* ``answer`` and ``choices``: the gold choice (y*) and the options, for MMAU string matching,
* ``num_tools`` (optional): |z|, for the optional per-tool cost.

Differential (the paper's): ``r = 1[ŷ = y*] − 1[y_base = y*]`` ∈ {−1, 0, +1}.
Binary (the ablation):     ``r = 1[ŷ = y*]`` ∈ {0, 1}.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from .scoring import resolve_reply, string_match

RewardFn = Callable[..., list[float]]


def _correct(predictions, answer, choices) -> list[float]:
    """MMAU string match, a reply naming a choice by its label ("B") read as that choice."""
    return [float(string_match(a, resolve_reply(p, c), c)) for p, a, c in zip(predictions, answer, choices)]


def _cost(num_tools, tool_cost: float, n: int) -> list[float]:
    if not tool_cost:
        return [0.0] * n
    if num_tools is None:
        raise ValueError("tool_cost > 0 needs the 'num_tools' column")
    return [tool_cost * k for k in num_tools]


def differential_reward(
    prompts, completions, *, predictions, base_predictions, answer, choices, num_tools=None, tool_cost: float = 0.0, **_
) -> list[float]:
    """``1[ŷ = y*] − 1[y_base = y*]`` (minus ``tool_cost·|z|``): credit only for what the tools changed."""
    with_tools = _correct(predictions, answer, choices)
    without = _correct(base_predictions, answer, choices)
    cost = _cost(num_tools, tool_cost, len(completions))
    return [w - b - c for w, b, c in zip(with_tools, without, cost)]


def binary_reward(
    prompts, completions, *, predictions, answer, choices, num_tools=None, tool_cost: float = 0.0, **_
) -> list[float]:
    """``1[ŷ = y*]`` (minus ``tool_cost·|z|``): the ablation, blind to whether tools were needed."""
    correct = _correct(predictions, answer, choices)
    cost = _cost(num_tools, tool_cost, len(completions))
    return [w - c for w, c in zip(correct, cost)]


REWARDS: dict[str, RewardFn] = {"differential": differential_reward, "binary": binary_reward}
SIGNALS = ("binary", "confidence")


def get_reward(kind: str, tool_cost: float = 0.0) -> RewardFn:
    if kind not in REWARDS:
        raise ValueError(f"reward.kind must be one of {sorted(REWARDS)}, got {kind!r}")
    fn = partial(REWARDS[kind], tool_cost=tool_cost)
    fn.__name__ = f"{kind}_reward"  # TRL logs rewards by function name
    return fn


@dataclass
class RewardConfig:
    kind: str = "differential"
    """differential (1[ŷ = y*] − 1[y_base = y*]) or binary (1[ŷ = y*])."""
    tool_cost: float = 0.0
    """Subtracted per called tool. 0 is the paper's reward; the embedded configs use 0.05, because
    without a price a router that cannot tell when tools help calls several of them anyway and loses
    little (docs/history.md, "Tool cost")."""

    signal: str = "binary"
    """What "right" is worth: ``binary`` (1[ŷ = y*], the paper's) or ``confidence`` (the reasoner's probability
    of the right choice, the softmax of its choice scores: a denser signal from each answer, where 0/1
    rewards are noisy at 4 to 9 choices; the differential kind then takes p(right | subset) − p(right | no
    tool)).  ``confidence`` reads the answer table's scores (table.enabled, grpo.objective: expected); an
    answer without scores counts 0/1.  An ablation of the paper's reward, not the default."""

    def __post_init__(self):
        if self.signal not in SIGNALS:
            raise ValueError(f"reward.signal must be one of {list(SIGNALS)}, got {self.signal!r}")
        if self.kind not in REWARDS:
            raise ValueError(f"reward.kind must be one of {sorted(REWARDS)}, got {self.kind!r}")
        if not isinstance(self.tool_cost, (int, float)) or not 0 <= self.tool_cost < 1:
            raise ValueError(f"reward.tool_cost must be a number in [0, 1), got {self.tool_cost!r}")


__all__ = ["RewardConfig", "REWARDS", "binary_reward", "differential_reward", "get_reward"]

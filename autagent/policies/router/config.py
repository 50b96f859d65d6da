"""The router's settings (``policy.router``): its model, and how it trains.

The split follows TRL's.  A model's own config travels with its weights (a model's ``config.json``): here
:class:`RouterConfig`, which the plugin keeps and a warm start's replaces.  A trainer's config is the
shared training arguments plus its own (TRL's ``GRPOConfig`` extends ``TrainingArguments``): here the run's
``grpo:`` section, which both policies read, plus the router-only fields of :class:`RouterPolicyConfig`
(learning rate, entropy bonus, credit, objective, the answer table), joined into the one
:class:`RouterGRPOConfig` the trainer reads.  The LM policy's own trainer fields sit in ``policy.lm`` the
same way, so no shared section holds a setting that the other policy would silently ignore.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..grpo import GRPOConfig
from .model import RouterConfig
from .table import TableConfig

CREDITS = ("subset", "tool")
OBJECTIVES = ("sampled", "expected")


@dataclass
class RouterTraining:
    """The router trainer's own fields (``policy.router.<field>``), on top of the shared ``grpo:``."""

    learning_rate: float = 3e-3
    """AdamW learning rate (the LM policy's is ``policy.lm.learning_rate``, 1e-6 in the paper)."""
    entropy_coef: float = 0.0
    """Weight of a bonus on the mean per-tool Bernoulli entropy of the policy, which keeps a tool that helps
    on few queries (emotion, speakers) sampled; 0 is the paper's objective."""
    credit: str = "subset"
    """``subset`` (the paper: one advantage per sampled subset) or ``tool`` (each tool's decision is
    credited with what flipping it changes in the reward; :mod:`autagent.policies.grpo`)."""
    objective: str = "sampled"
    """``sampled`` (GRPO: G subsets drawn per query, the clipped ratio) or ``expected`` (the exact expected
    reward over every subset, read from an answer table, with the exact KL: :mod:`.exact`; needs
    ``policy.router.table.enabled``)."""

    def check_training(self) -> None:
        if self.learning_rate <= 0:
            raise ValueError(f"policy.router.learning_rate must be > 0, got {self.learning_rate}")
        if self.entropy_coef < 0:
            raise ValueError(f"policy.router.entropy_coef must be >= 0, got {self.entropy_coef}")
        if self.credit not in CREDITS:
            raise ValueError(f"policy.router.credit must be one of {list(CREDITS)}, got {self.credit!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"policy.router.objective must be one of {list(OBJECTIVES)}, got {self.objective!r}")


TRAINING_FIELDS = tuple(f.name for f in dataclasses.fields(RouterTraining))


@dataclass
class RouterGRPOConfig(RouterTraining, GRPOConfig):
    """What :class:`~.train.RouterTrainer` reads: the shared ``grpo:`` fields and the router's own, in one
    object (:meth:`join`), as TRL's trainer reads one ``GRPOConfig``; the run sets the reward, its price and
    each member's seed on it (as TRL's ``GRPOConfig`` holds the seed)."""

    reward_kind: str = "differential"
    """The reward the trainer scores with (``reward.kind``: differential or binary)."""
    tool_cost: float = 0.0
    """The price per tool the reward charges in training (``reward.tool_cost``, or cross-validation's choice)."""
    seed: int = 0
    """Batches' and draws' seed (a member's: the run's seed · members + member)."""

    def __post_init__(self):
        GRPOConfig.__post_init__(self)
        self.check_training()
        if self.credit == "tool" and self.advantage != "reward":
            raise ValueError(
                f"policy.router.credit: tool is its own baseline (r(z) - r(z with the tool flipped)); "
                f"it needs grpo.advantage: reward, got {self.advantage!r}"
            )

    @classmethod
    def join(cls, grpo: GRPOConfig, router: RouterTraining) -> RouterGRPOConfig:
        shared = {f.name: getattr(grpo, f.name) for f in dataclasses.fields(GRPOConfig)}
        return cls(**shared, **{name: getattr(router, name) for name in TRAINING_FIELDS})


@dataclass
class RouterPolicyConfig(RouterTraining, RouterConfig):
    """``policy.router``: the model's fields (:class:`RouterConfig`, what a plugin keeps: :meth:`model`),
    the trainer's (:class:`RouterTraining`) and the answer table asked before training."""

    table: TableConfig = field(default_factory=TableConfig)
    """The answer table asked before training, its budget and cross-validation (:mod:`.table`)."""

    def __post_init__(self):
        RouterConfig.__post_init__(self)
        self.check_training()
        if self.objective == "expected" and not self.table.enabled:
            raise ValueError(
                "policy.router.objective: expected reads each subset's reward from the answer table: "
                "policy.router.table.enabled"
            )
        if self.credit == "tool" and self.abstain:
            raise ValueError(
                "policy.router.credit: tool credits each tool apart, which needs a router that draws its tools "
                "independently (policy.router.abstain: false)"
            )

    def model(self) -> RouterConfig:
        """The model's settings alone: what the router is built from and its plugin records."""
        return RouterConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RouterConfig)})

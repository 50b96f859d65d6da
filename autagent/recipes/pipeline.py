"""What a policy's training pipeline provides to ``autagent train`` (:mod:`.train`), declared.

``run_train`` prepares the data, the tool records and the reasoner (a :class:`~.run.RunContext`), then hands
them to the pipeline of ``policy.kind`` (:mod:`.router`, :mod:`.lm`): it trains and returns a
:class:`TrainedPolicy`; after training it does what its policy needs (the router: the back-off fit, the
training plot, the certificate); the run evaluates the plugin the pipeline gives it and has the pipeline
write the plugin with the evaluation's table.  As torchtune's ``recipe_interfaces.py`` declares what a
recipe provides, :class:`PolicyPipeline` declares these steps, so a new policy knows what to write and the
run reads no policy's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..config import RunConfig
from ..evaluation.phases import Phases
from .run import RunContext


@dataclass
class TrainedPolicy:
    """What a pipeline's training returns."""

    plugin_dir: Path | None
    """Where the plugin is, or will be written (None on a rank that exports nothing)."""
    summary: dict
    """What training measured: ``metrics.json``'s ``training`` (the plugin's metrics)."""
    plugin: object | None = None
    """The trained plugin already loaded (``select_many``, ``manifest``), where the export loaded it (the LM's)."""
    pending: object | None = None
    """The plugin made in memory and not yet written (the router's :class:`RouterDraft`): the pipeline's
    :meth:`PolicyPipeline.write` writes it once; None once written, or where the export wrote it."""


@runtime_checkable
class PolicyPipeline(Protocol):
    """A policy's training, as ``run_train`` drives it."""

    def train(self, ctx: RunContext, resume: bool) -> TrainedPolicy:
        """Train on ``ctx``'s splits, records and reasoner (continuing the run's checkpoints on ``resume``)."""

    def after_training(self, ctx: RunContext, trained: TrainedPolicy, phases: Phases) -> None:
        """What the policy does between training and evaluation, each step timed as a phase."""

    def evaluated(self, trained: TrainedPolicy, config: RunConfig, more_tools: bool = False):
        """The plugin the evaluation under ``config`` scores (its operating point set), or None to load it from
        its folder; ``more_tools``: ``eval.add_tools``' evaluation, whose ``config`` enables more tools."""

    def write(self, trained: TrainedPolicy, evaluation: dict | None) -> str:
        """The plugin's folder as it ships, with the run's ``evaluation`` table on its card (None: not
        evaluated); returns its content hash, the one metrics.json records."""

    def member_seconds(self, ctx: RunContext) -> list[float]:
        """Seconds per training step of each member the policy trains apart (none: ``[]``)."""

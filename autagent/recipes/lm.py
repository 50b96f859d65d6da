"""The LM policy's training pipeline (:class:`LMPipeline`, a :class:`.pipeline.PolicyPipeline`): its steps are
:mod:`autagent.policies.lm.recipe`'s (y_base, TRL's GRPO, the export of the model folder), read here as the
declared interface.  Its export writes the plugin and loads it; the card is rewritten with the evaluation.
"""

from __future__ import annotations

from ..config import RunConfig
from ..evaluation.phases import Phases
from ..plugin.manifest import update_card
from ..policies.lm import recipe
from .pipeline import TrainedPolicy
from .run import RunContext


class LMPipeline:
    """The LM agent's :class:`.pipeline.PolicyPipeline`."""

    def train(self, ctx: RunContext, resume: bool) -> TrainedPolicy:
        """TRL on every rank; rank 0 exports the plugin and keeps the trained model loaded as its plugin."""
        plugin_dir, summary, plugin = recipe.train(ctx, resume)
        return TrainedPolicy(plugin_dir, summary, plugin=plugin)

    def after_training(self, ctx: RunContext, trained: TrainedPolicy, phases: Phases) -> None:
        recipe.after_training(ctx, trained.plugin_dir, trained.summary, phases)

    def evaluated(self, trained: TrainedPolicy, config: RunConfig, more_tools: bool = False):
        """The trained model already loaded, at its own threshold; with more tools, loaded from its folder."""
        return None if more_tools else trained.plugin

    def write(self, trained: TrainedPolicy, evaluation: dict | None) -> str:
        """The card rewritten with the run's table (the export wrote the folder); the new content hash."""
        return update_card(trained.plugin_dir, evaluation)

    def member_seconds(self, ctx: RunContext) -> list[float]:
        return recipe.member_seconds(ctx)


PIPELINE = LMPipeline()

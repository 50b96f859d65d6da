"""The LM policy's training pipeline (:class:`LMPipeline`, a :class:`.pipeline.PolicyPipeline`): its steps are
:mod:`autagent.policies.lm.recipe`'s (y_base, TRL's GRPO, the export of the model folder), read here as the
declared interface.  Its training makes the plugin in memory (:class:`~autagent.policies.lm.plugin.LMDraft`,
the trained model): the run evaluates that model and writes the folder once, with the evaluation's table on
its card, as the router's pipeline does.
"""

from __future__ import annotations

from ..config import RunConfig
from ..evaluation.phases import Phases
from ..policies.lm import recipe
from ..policies.lm.plugin import LMDraft, open_plugin
from .evaluate import ready_policy
from .pipeline import TrainedPolicy
from .run import RunContext


class LMPipeline:
    """The LM agent's :class:`.pipeline.PolicyPipeline`."""

    def train(self, ctx: RunContext, resume: bool) -> TrainedPolicy:
        """TRL on every rank; rank 0 makes the plugin in memory, the trained model loaded as its plugin."""
        plugin_dir, summary, draft = recipe.train(ctx, resume)
        return TrainedPolicy(plugin_dir, summary, plugin=draft and draft.open(), pending=draft)

    def after_training(self, ctx: RunContext, trained: TrainedPolicy, phases: Phases) -> None:
        recipe.after_training(ctx, trained.plugin_dir, trained.summary, phases)

    def evaluated(self, trained: TrainedPolicy, config: RunConfig, more_tools: bool = False):
        """The trained model already loaded; with more tools, what loading the plugin with them gives (an LM
        selects among the tools it trained with: refused, naming them)."""
        if not more_tools:
            return trained.plugin
        draft: LMDraft = trained.pending
        return ready_policy(lambda extra: open_plugin(draft.directory, draft.manifest, extra), draft.manifest, config)

    def write(self, trained: TrainedPolicy, evaluation: dict | None) -> str:
        """The plugin folder, written once with the run's table on its card; its content hash."""
        content = trained.pending.write(evaluation)["content_hash"]
        trained.pending = None
        return content

    def member_seconds(self, ctx: RunContext) -> list[float]:
        return recipe.member_seconds(ctx)


PIPELINE = LMPipeline()

"""Tool-selection policies: the ``router`` (the embedded default) and the paper's ``lm`` agent.

Both sample tool subsets for a query, select greedily, train with GRPO on the same advantage code
(:mod:`.grpo`) and export a plugin in the shared format (:mod:`autagent.plugin.manifest`),
with what :func:`export_fields` takes from the run.
:mod:`.baselines` holds the untrained selectors of the paper's baselines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..plugin.manifest import PluginTarget
from .lm.config import LMPolicyConfig
from .router.config import RouterPolicyConfig

KINDS = ("router", "lm")


@dataclass
class PolicyConfig:
    kind: str = "router"
    """router (the embedded default) | lm (the paper's Qwen2-Audio agent on TRL)."""
    router: RouterPolicyConfig = field(default_factory=RouterPolicyConfig)
    """The router's settings: its model's, its trainer's (on top of ``grpo:``) and its answer table's."""
    lm: LMPolicyConfig = field(default_factory=LMPolicyConfig)
    """The LM agent's settings: its model's and its trainer's (on top of ``grpo:``)."""
    init_from: str | None = None
    """Router only: a router plugin folder to start from (warm start; ``{seed}`` is replaced by the run's
    seed). Its routers start the policy and are GRPO's reference, so the KL term keeps what it knew; its
    model's settings replace ``policy.router``'s (the training ones stay the run's); its zero-shot head and
    back-off travel into the new plugin."""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"policy.kind must be 'router' or 'lm', got {self.kind!r}")
        if self.init_from is not None and self.kind != "router":
            raise ValueError("policy.init_from starts a router from a router plugin: policy.kind must be router")


def export_fields(ctx, summary: dict) -> dict:
    """What a policy's export takes from the run (``export_router`` and ``export_lm`` name these
    parameters alike): the plugin folder, the run's tools as configured, its resolved config, and the
    training summary as the plugin's metrics.  ``ctx`` is the recipe's :class:`autagent.recipes.run.RunContext`."""
    tools = ctx.config.tools
    return {
        "directory": ctx.run_dir / "plugin",
        "tool_ids": ctx.tool_ids,
        "tools_profile": tools.profile,
        "tool_settings": tools.settings,
        "max_seconds": tools.max_seconds,
        "training_config": ctx.config_dict,
        "metrics": {"training": summary},
    }


def export_target(ctx, summary: dict) -> PluginTarget:
    """:func:`export_fields` as the :class:`PluginTarget` the router's export takes."""
    return PluginTarget(**export_fields(ctx, summary))

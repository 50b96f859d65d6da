"""``autagent adapt``: a shipped router plugin, adapted to the reasoner in front of it.

A plugin trained against one reasoner selects the tools whose records helped *that* reasoner.  In front
of another, the same records may read differently (a text LM that cannot map ``Bbm`` to "B flat minor"
gains nothing from the chord tool).  Adapting is training with three changes (:mod:`autagent.policies.router.recipe`):

* a **warm start** (``policy.init_from``): the plugin's routers start the policy and are the KL
  reference, so what it knew stays unless the new reasoner's answers say otherwise;
* an **answer table** asked before training (``policy.router.table``): no tool, each tool alone, all tools
  and all but each one per training query, within ``--budget`` distinct answers (answers already in the cache
  are free), read by the exact expected-reward objective (``policy.router.objective: expected``);
* **cross-validated settings** (``policy.router.table.crossval``): the training price and the KL weight chosen on
  the training queries' table by 4-fold cross-validation, at the user's price ``--tool-cost`` (default
  0: accuracy alone; the plugin's own price was set for the reasoner it was trained against).

Evaluation is a separate ``autagent eval --plugin OUT`` (outside the budget).  A reasoner that fails
mid-run stops it; every answer it gave is in the answer cache, so ``--resume`` continues free of charge.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..config import ConfigError, RunConfig, config_from_mapping, load_config, migrate_moved
from ..plugin.manifest import read_manifest
from .train import run_train

ADAPT_DEFAULTS = {
    "reward.tool_cost": 0.0,
    "policy.router.table.enabled": True,
    "policy.router.table.design": ["empty", "singles", "all", "leave_one_out"],
    "policy.router.objective": "expected",
    "grpo.steps": 150,
    "grpo.batch_size": 16,
    "grpo.beta": 0.04,
    "grpo.inner_epochs": 1,
    "policy.router.table.crossval.folds": 4,
    "policy.router.table.crossval.grid": {"reward.tool_cost": [0.0, 0.02], "grpo.beta": [0.0, 0.01, 0.04]},
    "logging.wandb": False,
}
"""What ``autagent adapt`` sets on the plugin's own training config (``--set`` overrides any of them)."""


def adapt_config(
    plugin: str | Path,
    reasoner: str,
    out: str | Path,
    budget: int | None = None,
    tool_cost: float | None = None,
    config: str | Path | None = None,
    overrides: dict | None = None,
) -> RunConfig:
    """The run config of an adaptation: the plugin's training config (or ``config``), its data, tools and
    router, with the reasoner, the warm start, the table, the budget and the price set."""
    manifest = read_manifest(plugin)
    if manifest.get("policy") != "router":
        raise ConfigError(f"{plugin}: autagent adapt adapts router plugins, this one is {manifest.get('policy')!r}")
    settings = dict(ADAPT_DEFAULTS)
    settings.update(
        {
            "name": f"adapt-{Path(out).name}",
            "policy.init_from": str(Path(plugin).resolve()),
            "reasoner.kind": reasoner,
        }
    )
    if budget is not None:
        settings["policy.router.table.budget"] = budget
    if tool_cost is not None:
        settings["reward.tool_cost"] = tool_cost
    settings.update(overrides or {})
    if config is not None:
        return load_config(config, settings)
    base = migrate_moved(manifest.get("training_config") or {})  # a plugin trained before issue 52's move
    base.pop("eval_reasoner", None)  # adapting trains against one reasoner; evaluation is autagent eval's
    # the table and its cross-validation are the adaptation's, not the source run's
    ((base.get("policy") or {}).get("router") or {}).pop("table", None)
    return config_from_mapping(base, settings, f"{plugin}/manifest.json training_config (--config to use another)")


def run_adapt(config: RunConfig, out: str | Path, resume: bool = False) -> dict:
    """Train the adaptation (no evaluation) and copy its plugin to ``out``; returns the training summary."""
    out = Path(out)
    if out.exists() and not resume:
        raise FileExistsError(f"{out} exists: choose another --out, or --resume the adaptation that writes it")
    metrics = run_train(config, resume=resume, evaluate=False)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(config.run_dir / "plugin", out)
    read_manifest(out)  # the copy verifies as the original did
    return metrics["training"]

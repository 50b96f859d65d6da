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

With ``certify`` (``--certify EPS``, on by default) part of the budget's queries is held out from training
and the cheapest operating point that provably loses at most EPS against All-Tools is certified on them
(:mod:`.certify`); the plugin then uses that point by default.

Evaluation is a separate ``autagent eval --plugin OUT`` (outside the budget).  A reasoner that fails
mid-run stops it; every answer it gave is in the answer cache, so ``--resume`` continues free of charge.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..config import ConfigError, RunConfig, config_from_mapping, load_config, migrate_moved
from ..plugin.manifest import read_manifest
from ..plugin.provenance import plugin_settings
from .certify import DEFAULT_BUDGET, CertifyConfig, answers_per_query, certify, held_out_queries, write_certificate
from .run import load_splits, tool_records
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
    "policy.router.table.budget": DEFAULT_BUDGET,
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
    # of the recorded config, the plugin's selection and training settings alone (never the reasoner, a
    # secret, a path or an import; a recorded data file, tools.extra or tools.settings refused unless the
    # user gives it): autagent.plugin.provenance, docs/design.md "Who decides what"
    recorded = manifest.get("training_config") or {}
    manifest["training_config"] = plugin_settings(recorded, overrides or {}, str(plugin), migrate_moved)
    return config_from_mapping(
        plugin_base(plugin, manifest), settings, f"{plugin}/manifest.json training_config (--config to use another)"
    )


def hold_out(config: RunConfig, cfg: CertifyConfig | None) -> RunConfig:
    """The certification's share of the budget: its queries held out of the table and training, the table's
    budget what is left (refused where the budget cannot hold a query out)."""
    table = config.policy.router.table
    if cfg is None:
        return config
    if table.budget is None:
        raise ConfigError("--certify needs a --budget (the held-out queries are a share of it)")
    queries = held_out_queries(table.budget, cfg.share, cfg.max_k)
    reserve = queries * answers_per_query(cfg.max_k)
    if queries < 1 or table.budget - reserve < 1:
        raise ConfigError(f"--budget {table.budget} is too small to hold queries out for --certify (or --no-certify)")
    table.held_out, table.budget, table.certify = queries, table.budget - reserve, cfg
    return config


def plugin_base(plugin, manifest: dict) -> dict:
    """The plugin's own training config, as adapting starts from it."""
    base = migrate_moved(manifest.get("training_config") or {})  # a plugin trained before issue 52's move
    base.pop("eval_reasoner", None)  # adapting trains against one reasoner; evaluation is autagent eval's
    # the table and its cross-validation are the adaptation's, not the source run's
    ((base.get("policy") or {}).get("router") or {}).pop("table", None)
    return base


def run_adapt(
    config: RunConfig, out: str | Path, resume: bool = False, certify_with: CertifyConfig | None = None
) -> dict:
    """Train the adaptation (no evaluation), certify its cheapest safe point on the held-out queries
    (``certify_with``; see :func:`hold_out`) and copy its plugin to ``out``; returns the training summary
    (with ``certificate``)."""
    out = Path(out)
    if out.exists() and not resume:
        raise FileExistsError(f"{out} exists: choose another --out, or --resume the adaptation that writes it")
    metrics = run_train(config, resume=resume, evaluate=False)
    summary = metrics["training"]
    if certify_with is not None:
        summary["certificate"] = certify_run(config, certify_with)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(config.run_dir / "plugin", out)
    read_manifest(out)  # the copy verifies as the original did
    return summary


def certify_run(config: RunConfig, cfg: CertifyConfig) -> dict:
    """The run's plugin certified on its held-out training queries (:mod:`.certify`), the certificate
    written into it; the answers go through the shared answer cache."""
    # looked up when called, not at import: a test patches them on their modules
    from ..api import load
    from ..policies.router.table import held_out_ids
    from ..reasoners import build_reasoner

    table = config.policy.router.table
    train = load_splits(config).train
    held = held_out_ids([s.id for s in train], table.order_seed, table.held_out)
    samples = [s for s in train if s.id in held]
    records = tool_records(config, samples)
    plugin = load(config.run_dir / "plugin", tools_profile=config.tools.profile, tool_settings=config.tools.settings)
    reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
    try:
        certificate = certify(plugin, samples, records, reasoner, config.tools.tool_ids, cfg)
    finally:
        reasoner.close()
    write_certificate(config.run_dir / "plugin", certificate)
    return certificate

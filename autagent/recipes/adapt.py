"""``autagent adapt``: a shipped router plugin, adapted to the reasoner in front of it.

A plugin trained against one reasoner selects the tools whose records helped *that* reasoner.  In front
of another, the same records may read differently (a text LM that cannot map ``Bbm`` to "B flat minor"
gains nothing from the chord tool).  Adapting is training with three changes (:mod:`autagent.recipes.router`):

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

import logging
import os
import shutil
from pathlib import Path

from ..config import ConfigError, RunConfig, config_from_mapping, load_config, migrate_moved
from ..plugin.manifest import read_manifest
from ..plugin.provenance import plugin_settings
from ..policies.router.table import CertifyConfig, designed_subsets
from .certify import DEFAULT_BUDGET, answers_per_query, held_out_queries
from .train import run_started, run_train

log = logging.getLogger("autagent")

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


def _split(budget: int, cfg: CertifyConfig | None) -> tuple[int, int]:
    """(held-out queries, the table's answers) of a budget, with or without a certification."""
    if cfg is None:
        return 0, budget
    queries = held_out_queries(budget, cfg.share, cfg.max_k)
    return queries, budget - queries * answers_per_query(cfg.max_k)


def smallest_budget(design: int, cfg: CertifyConfig | None) -> int:
    """The smallest budget whose table completes one query's design (and, certifying, holds a query out)."""
    budget = design
    while not (_split(budget, cfg)[0] >= (cfg is not None) and _split(budget, cfg)[1] >= design):
        budget += 1
    return budget


def hold_out(config: RunConfig, cfg: CertifyConfig | None) -> RunConfig:
    """``--certify``: its share of the budget's answers buys held-out queries (kept out of the table and of
    training, certified on after it: :mod:`.certify`), the table's budget is what is left.  A budget that
    cannot complete one query's design (16 answers with seven tools), or hold a query out, is refused here,
    before any tool or reasoner work, naming the smallest that works."""
    table = config.policy.router.table
    if table.budget is None:
        if cfg is not None:
            raise ConfigError("--certify needs a --budget (the held-out queries are a share of it)")
        return config
    design = len(designed_subsets(config.tools.tool_ids, table.design))
    if table.budget < smallest_budget(design, cfg):
        why = "and hold queries out for --certify " if cfg is not None else ""
        raise ConfigError(
            f"--budget {table.budget} cannot complete one training query's {design} answers {why}(the smallest "
            f"that works is {smallest_budget(design, cfg)}; a useful table takes hundreds of queries: the default "
            f"is {DEFAULT_BUDGET})"
        )
    if cfg is not None:
        table.held_out, table.budget = _split(table.budget, cfg)
        table.certify = cfg
    return config


def check_reachable(config: RunConfig, timeout_s: float = 10.0) -> None:
    """One cheap request (``GET <base_url>/models``) to a served reasoner before any tool work: a server that is
    down, slow or refusing is one line naming the URL, not 5,000 tool calls and then 200 retries."""
    if config.reasoner.kind != "openai":
        return
    import httpx

    url = config.reasoner.openai.base_url.rstrip("/") + "/models"
    key = os.environ.get(config.reasoner.openai.api_key_env, "")
    try:
        reply = httpx.get(url, timeout=timeout_s, headers={"Authorization": f"Bearer {key}"} if key else {})
    except httpx.HTTPError as err:
        raise ConfigError(
            f"nothing answers at {url} ({type(err).__name__}); start the server (docs/vllm.md) or point "
            "adapt at it with --upstream URL"
        ) from None
    if reply.status_code in (401, 403):
        raise ConfigError(
            f"{url} refused the key (HTTP {reply.status_code}): set ${config.reasoner.openai.api_key_env}"
        )
    if reply.status_code >= 400:
        raise ConfigError(f"{url} answered HTTP {reply.status_code}: is it an OpenAI-compatible server's /v1?")


def plugin_base(plugin, manifest: dict) -> dict:
    """The plugin's own training config, as adapting starts from it."""
    base = migrate_moved(manifest.get("training_config") or {})  # a plugin trained before issue 52's move
    base.pop("eval_reasoner", None)  # adapting trains against one reasoner; evaluation is autagent eval's
    # the table and its cross-validation are the adaptation's, not the source run's
    ((base.get("policy") or {}).get("router") or {}).pop("table", None)
    return base


def run_adapt(config: RunConfig, out: str | Path, resume: bool = False) -> dict:
    """Train the adaptation (no evaluation; certified where ``policy.router.table.certify`` says so, see
    :func:`hold_out`) and copy its plugin to ``out``; returns the training summary (with ``certificate``).
    A served reasoner is asked once first (:func:`check_reachable`); an adaptation that stopped before writing
    ``out`` starts over on a plain re-run (its answers are in the shared cache: nothing is paid twice)."""
    out = Path(out)
    if out.exists() and not resume:
        raise FileExistsError(f"{out} exists: choose another --out, or --resume the adaptation that writes it")
    check_reachable(config)
    if not resume and run_started(config.run_dir):
        log.info("%s: starting over an adaptation that stopped (its answers are in the cache, free)", config.run_dir)
        shutil.rmtree(config.run_dir)
    metrics = run_train(config, resume=resume, evaluate=False)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(config.run_dir / "plugin", out)
    read_manifest(out)  # the copy verifies as the original did
    return metrics["training"]

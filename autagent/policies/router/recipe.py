"""The router's step of the shared recipe (:mod:`autagent.pipeline`): features, the answer table,
cross-validation, GRPO, plugin export.

* From scratch, or from a router plugin (``policy.init_from``, :mod:`.warm`): its routers start the
  policy and are GRPO's reference; its head and back-off travel into the new plugin.
* With ``table.enabled`` (:mod:`.table`) the reasoner first answers a designed set of subsets per
  training query, within ``table.budget`` distinct answers, and training reads those answers; dev
  queries are then not asked (they would spend the budget): ``table.crossval`` chooses settings on the
  training queries instead (:mod:`.crossval`).
* Otherwise GRPO asks the reasoner every new (query, subset) it draws, as the paper does.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from tools import get_tool

from ...data.progress import progress as tqdm
from .. import export_fields
from .costs import tool_seconds, tool_values
from .crossval import apply, candidates, cross_validate
from .ensemble import RouterEnsemble
from .features import Featurizer
from .model import Router
from .plugin import attach_backoff, export_router
from .table import AnswerTable, Budget
from .train import RouterTrainer
from .warm import load_warm_start
from .zero_shot import DescriptionHead


def fill_table(ctx, samples) -> tuple[AnswerTable, Budget, dict]:
    """The training queries' answer table, asked within the run's budget (what a stopped run spent is
    read back from ``budget.json``), and what it cost."""
    cfg = ctx.config.table
    budget = Budget(cfg.budget, ctx.run_dir / "budget.json")
    table = AnswerTable(samples, ctx.tool_ids, cfg.design)
    bar = tqdm(total=len(samples), desc="answer table", unit="query", disable=not ctx.config.logging.progress)
    try:
        table.fill(ctx.reasoner, ctx.records, budget, cfg.order_seed, cfg.items_per_call, bar, cfg.budget_counts)
        if bar.n < len(samples):  # said on the bar, which would otherwise stop part-way like a hang
            bar.set_postfix_str(f"stopped: the budget of {cfg.budget} answers is spent", refresh=False)
    finally:
        bar.close()
    summary = {
        "design": list(cfg.design),
        "subsets_per_query": len(table.design),
        "queries": len(table.items),
        "queries_left_out": len(table.incomplete),
        "budget": cfg.budget,
        "answers_spent": budget.spent,
        "surrogate_agreement": table.surrogate_fidelity(),
    }
    logging.getLogger("autagent").info(
        "answer table: %d training queries x %d subsets; %d answers asked of a budget of %s (cached ones free); "
        "%d queries left out",
        len(table.items),
        len(table.design),
        budget.spent,
        cfg.budget or "no cap",
        len(table.incomplete),
    )
    if not table.items:
        raise ValueError(
            f"table.budget {cfg.budget}: no training query got its whole design of {len(table.design)} answers; "
            "raise the budget"
        )
    return table, budget, summary


def train_router(ctx, resume: bool = False) -> tuple[Path, dict, None]:
    """``ctx`` is the recipe's :class:`autagent.pipeline.RunContext`; returns (plugin folder, summary, None)."""
    config = ctx.config
    source = None
    if config.policy.init_from:
        source = load_warm_start(config.policy.init_from.format(seed=config.seed), ctx.tool_ids)
    router_config = source.config if source else config.policy.router
    members = len(source.members) if source else router_config.ensemble
    torch.manual_seed(config.seed * members)  # as before ensembles: a single router's draws are unchanged
    featurizer = source.featurizer if source else Featurizer(router_config)
    samples, summary, table, budget = ctx.splits.train, {}, None, None
    if config.table.enabled:
        table, budget, summary["table"] = fill_table(ctx, samples)
        kept = set(table.items)
        samples = [s for s in samples if s.id in kept]
    features = featurizer.of_samples(samples)
    dev = None
    if ctx.splits.dev and table is None:  # a table run asks nothing of dev queries: they would spend the budget
        dev = (featurizer.of_samples(ctx.splits.dev), ctx.splits.dev)
    descriptions = featurizer.tool_descriptions([get_tool(t).description for t in ctx.tool_ids])
    cuts = {}

    def new_router(member: int, train_features: torch.Tensor) -> Router:
        nonlocal cuts
        if source is not None:
            return source.member(member)
        router = Router(featurizer.dim, router_config, len(ctx.tool_ids), descriptions, featurizer.columns)
        cuts = router.fit_familiarity(train_features, dev[0] if dev else None)  # {} unless unfamiliar_fallback
        return router

    def trainer(router, index, grpo, price, seed, run_dir=None, logger=None) -> RouterTrainer:
        return RouterTrainer(
            router,
            features[index],
            [samples[i] for i in index],
            ctx.records,
            ctx.reasoner,
            grpo,
            ctx.tool_ids,
            config.reward.kind,
            price,
            run_dir,
            seed,
            config.checkpoint_every,
            dev if run_dir is not None else None,
            logger=logger,
            progress=config.logging.progress and run_dir is not None,
            columns=featurizer.columns,
            table=table,
            budget=budget,
            outside=config.table.outside,
            unasked=config.table.unasked,
            signal=config.reward.signal,
        )

    grpo, price = config.grpo, config.reward.tool_cost
    if table is not None and config.table.crossval.folds:

        def train_candidate(index, candidate):
            candidate_grpo, candidate_price = apply(config.grpo, config.reward.tool_cost, candidate)
            routers = []
            for m in range(members):
                torch.manual_seed(config.seed * members + m)
                router = new_router(m, features[index])
                trainer(router, index, candidate_grpo, candidate_price, config.seed * members + m).train()
                routers.append(router)
            return routers[0] if members == 1 else RouterEnsemble(routers)

        crossval = config.table.crossval
        steps = len(candidates(crossval.grid)) * crossval.folds
        bar = tqdm(total=steps, desc="cross-validation", disable=not config.logging.progress)
        try:
            found = cross_validate(
                crossval, samples, features, table, train_candidate, ctx.tool_ids, config.reward.tool_cost, bar
            )
        finally:
            bar.close()
        summary["crossval"] = found
        grpo, price = apply(config.grpo, config.reward.tool_cost, found["chosen"])
        torch.manual_seed(config.seed * members)
    runs, everything = [], list(range(len(samples)))
    for m in range(members):  # member 0 writes where a single router does; the others under members/
        seed = config.seed * members + m
        run_dir = ctx.run_dir if m == 0 else ctx.run_dir / "members" / str(m)
        if m:
            torch.manual_seed(seed)
        router = new_router(m, features)
        member = trainer(router, everything, grpo, price, seed, run_dir, ctx.logger if m == 0 else None)
        # a member the killed run never reached starts afresh; member 0 without checkpoints is an error
        history = member.train(resume=resume and (m == 0 or (run_dir / "checkpoints").exists()))
        runs.append((router, member, history))
    counters = [member.counters for _, member, _ in runs]
    summary.update(
        {
            "steps": runs[0][1].step,
            "members": members,
            "reasoner": ctx.reasoner.fingerprint(),
            "reasoner_where": ctx.reasoner.where,  # what answered (a server: its scoring, text or logprobs)
            "reasoner_calls": budget.spent if budget is not None else sum(c.reasoner_calls for c in counters),
            "naive_reasoner_calls": sum(c.naive_reasoner_calls for c in counters),
            "tool_runs": ctx.pool.computed,
            "naive_tool_runs": sum(c.naive_tool_runs for c in counters),
            "reasoner_failures": ctx.reasoner.failures,
            "unfamiliar_cuts": cuts,
            "price": config.reward.tool_cost,
            "training_price": price,
            "final": runs[0][2][-1] if runs[0][2] else None,
        }
    )
    if source is not None:
        summary["init_from"] = {"path": str(source.directory), "content_hash": source.manifest["content_hash"]}
    policy = runs[0][0] if members == 1 else RouterEnsemble([r for r, _, _ in runs])
    if source is not None:  # the source's head travels unchanged: a zero-step run selects as its source
        head = source.head
    else:  # tools added after training are scored by a head fitted to what the trained router selects
        head = DescriptionHead(featurizer.columns, descriptions.shape[1])
        tuning = (dev[0], policy.select(dev[0])) if dev else None
        summary["zero_shot_head"] = head.fit(features, descriptions, policy.select(features), tuning)
    values, values_source = None, None  # without a table, each tool alone is asked of every training query:
    if table is not None or config.eval.cost_curve:  # only when an eval's cost curve is to read them
        values, values_source = tool_values(ctx.tool_ids, samples, table, ctx.reasoner, ctx.records)
    inherited = source.manifest.get("tool_seconds") if source is not None else None
    costs = {"tool_seconds": tool_seconds(ctx.pool, ctx.tool_ids, inherited), "tool_values": values}
    fields = export_fields(ctx, summary)
    plugin_dir = export_router(
        router=policy, featurizer=featurizer, head=head, **costs, **fields, values_source=values_source
    )
    if source is not None and source.backoff is not None:
        kept = {k: v for k, v in source.manifest["backoff"].items() if k != "config"}
        attach_backoff(plugin_dir, source.backoff, kept)
    return plugin_dir, summary, None  # the recipe loads the exported plugin itself: it is cheap and checks it

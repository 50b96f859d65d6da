"""The router's training pipeline (:class:`RouterPipeline`, a :class:`.pipeline.PolicyPipeline` that
:mod:`.train` runs): features, the answer table, cross-validation, GRPO, the plugin made in memory, its
back-off fit and certification, and the one write of its folder.  The pieces it puts together are the
router's own (:mod:`autagent.policies.router`); this module only orders them for a run.

* From scratch, or from a router plugin (``policy.init_from``, :mod:`~autagent.policies.router.warm`): its
  routers start the policy and are GRPO's reference; its head and back-off travel into the new plugin.
* With ``policy.router.table.enabled`` (:mod:`~autagent.policies.router.table`) the reasoner first answers a
  designed set of subsets per training query, within ``table.budget`` distinct answers, and training reads
  those answers; dev queries are then not asked (they would spend the budget): ``table.crossval`` chooses
  settings on the training queries instead (:mod:`~autagent.policies.router.crossval`).
* Otherwise GRPO asks the reasoner every new (query, subset) it draws, as the paper does.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import torch

from tools import get_tool

from ..config import RunConfig
from ..data.progress import progress as tqdm
from ..evaluation.phases import Phases
from ..policies import export_target
from ..policies.router.answers import AnswerSource
from ..policies.router.backoff_fit import fit
from ..policies.router.config import RouterGRPOConfig
from ..policies.router.costs import tool_seconds, tool_values
from ..policies.router.crossval import apply, candidates, cross_validate
from ..policies.router.ensemble import RouterEnsemble
from ..policies.router.export import RouterDraft, RouterParts, draft_router
from ..policies.router.features import Featurizer
from ..policies.router.model import Router, RouterConfig
from ..policies.router.plots import member_step_seconds, plot_training
from ..policies.router.table import AnswerTable, Budget, BudgetError, held_out_ids
from ..policies.router.train import RouterTrainer, TrainingRun
from ..policies.router.warm import WarmStart, load_warm_start
from ..policies.router.zero_shot import DescriptionHead
from .certify import certify_run
from .evaluate import ready_policy
from .pipeline import TrainedPolicy
from .run import RunContext


def fill_table(ctx: RunContext, samples) -> tuple[AnswerTable, Budget, dict]:
    """The training queries' answer table, asked within the run's budget (what a stopped run spent is
    read back from ``budget.json``), and what it cost."""
    cfg = ctx.config.policy.router.table
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
        raise BudgetError(
            f"policy.router.table.budget {cfg.budget}: no training query got its whole design of "
            f"{len(table.design)} answers ({budget.spent} spent); raise the budget (--budget)"
        )
    return table, budget, summary


@dataclass
class PolicyStart:
    """How each member's router starts: a trainable copy of the warm start's member (``policy.init_from``),
    else a fresh router on the run's featurizer; and each member's seed."""

    ctx: RunContext
    source: WarmStart | None
    router_config: RouterConfig
    featurizer: Featurizer
    members: int
    descriptions: torch.Tensor
    cuts: dict = field(default_factory=dict)
    """The familiarity cuts the last fresh router fitted (``{}`` unless ``unfamiliar_fallback``)."""

    @classmethod
    def of(cls, ctx: RunContext) -> PolicyStart:
        config, source = ctx.config, None
        if config.policy.init_from:
            source = load_warm_start(config.policy.init_from.format(seed=config.seed), ctx.tool_ids)
        router_config = source.config if source else config.policy.router.model()
        members = len(source.members) if source else router_config.ensemble
        featurizer = source.featurizer if source else Featurizer(router_config)
        descriptions = featurizer.tool_descriptions([get_tool(t).description for t in ctx.tool_ids])
        return cls(ctx, source, router_config, featurizer, members, descriptions)

    def seed(self, member: int) -> int:
        return self.ctx.config.seed * self.members + member

    def router(self, member: int, train_features: torch.Tensor, dev_features: torch.Tensor | None) -> Router:
        if self.source is not None:
            return self.source.member(member)
        f = self.featurizer
        router = Router(f.dim, self.router_config, len(self.ctx.tool_ids), self.descriptions, f.columns)
        self.cuts = router.fit_familiarity(train_features, dev_features)
        return router

    def trainer(self, router, features, samples, answers, grpo, price, member, run=None) -> RouterTrainer:
        """GRPO for ``member`` at the training ``price`` (the trainer's reward, price and seed set in its config)."""
        kind, seed = self.ctx.config.reward.kind, self.seed(member)
        settings = dataclasses.replace(grpo, reward_kind=kind, tool_cost=price, seed=seed)
        return RouterTrainer(router, features, samples, answers, settings, run, self.featurizer.columns)


@dataclass
class Queries:
    """The training queries, their features and where their answers come from: with ``policy.router.table.enabled`` the
    answer table (filled within its budget, only the queries that got their whole design), else the reasoner
    asked as GRPO draws; dev queries (features, samples) only without a table, which they would spend."""

    ctx: RunContext
    samples: list
    features: torch.Tensor
    table: AnswerTable | None
    budget: Budget | None
    dev: tuple | None

    def answers(self) -> AnswerSource:
        """A fresh source for one trainer (its own y_base, memo and counters)."""
        cfg = self.ctx.config.policy.router.table
        return AnswerSource(
            self.ctx.reasoner,
            self.ctx.records,
            self.ctx.tool_ids,
            self.table,
            self.budget,
            cfg.outside,
            cfg.unasked,
            self.ctx.config.reward.signal,
        )


def train(ctx: RunContext, resume: bool = False) -> TrainedPolicy:
    """Start the policy, fill the table, cross-validate, train the members, fit the head, make the plugin
    (in memory: the run writes it once it is certified and evaluated)."""
    start = PolicyStart.of(ctx)
    torch.manual_seed(start.seed(0))  # as before ensembles: a single router's draws are unchanged
    queries, summary = training_queries(ctx, start.featurizer)
    grpo, price = RouterGRPOConfig.join(ctx.config.grpo, ctx.config.policy.router), ctx.config.reward.tool_cost
    if queries.table is not None and ctx.config.policy.router.table.crossval.folds:
        grpo, price, summary["crossval"] = choose_settings(ctx, start, queries)
    runs = train_members(ctx, start, queries, grpo, price, resume)
    summary.update(run_summary(ctx, start, runs, queries.budget, price))
    policy = runs[0][0] if start.members == 1 else RouterEnsemble([r for r, _, _ in runs])
    head = fit_head(start, policy, queries, summary)
    draft = export(ctx, start, policy, head, queries, summary)
    return TrainedPolicy(draft.directory, summary, pending=draft)


def training_queries(ctx: RunContext, featurizer: Featurizer) -> tuple[Queries, dict]:
    """The run's :class:`Queries` (the answer table filled first with ``policy.router.table.enabled``) and its
    summary."""
    samples, summary, table, budget, dev = ctx.splits.train, {}, None, None, None
    cfg = ctx.config.policy.router.table
    if cfg.held_out:  # a certification's queries: never in the table, never trained on
        held = held_out_ids([s.id for s in samples], cfg.order_seed, cfg.held_out)
        samples = [s for s in samples if s.id not in held]
        summary["held_out_queries"] = len(held)
    if cfg.enabled:
        table, budget, summary["table"] = fill_table(ctx, samples)
        kept = set(table.items)
        samples = [s for s in samples if s.id in kept]
    features = featurizer.of_samples(samples)
    if ctx.splits.dev and table is None:
        dev = (featurizer.of_samples(ctx.splits.dev), ctx.splits.dev)
    return Queries(ctx, samples, features, table, budget, dev), summary


def choose_settings(ctx: RunContext, start: PolicyStart, queries: Queries) -> tuple:
    """Cross-validation on the training queries (:mod:`.crossval`): the chosen (grpo, price) and its record."""
    config, features, samples = ctx.config, queries.features, queries.samples
    base = RouterGRPOConfig.join(config.grpo, config.policy.router)

    def train_candidate(index, candidate):
        candidate_grpo, candidate_price = apply(base, config.reward.tool_cost, candidate)
        routers = []
        for m in range(start.members):
            torch.manual_seed(start.seed(m))
            router = start.router(m, features[index], None)
            fold = [samples[i] for i in index]
            start.trainer(router, features[index], fold, queries.answers(), candidate_grpo, candidate_price, m).train()
            routers.append(router)
        return routers[0] if start.members == 1 else RouterEnsemble(routers)

    crossval = config.policy.router.table.crossval
    total = len(candidates(crossval.grid)) * crossval.folds
    bar = tqdm(total=total, desc="cross-validation", disable=not config.logging.progress)
    try:
        found = cross_validate(
            crossval, samples, features, queries.table, train_candidate, ctx.tool_ids, config.reward.tool_cost, bar
        )
    finally:
        bar.close()
    grpo, price = apply(base, config.reward.tool_cost, found["chosen"])
    torch.manual_seed(start.seed(0))
    return grpo, price, found


def train_members(ctx: RunContext, start: PolicyStart, queries: Queries, grpo, price, resume: bool) -> list[tuple]:
    """GRPO for each member of the ensemble: (router, trainer, history) each.  Member 0 writes where a single
    router does, the others under ``members/``.  On ``resume`` a member loads its last checkpoint; one without
    any (a member a killed run never reached, or every member of a run stopped while its answer table filled)
    starts afresh.  Whether there is a run to resume at all was decided when its folder was opened."""
    config, runs, dev = ctx.config, [], queries.dev
    for m in range(start.members):
        run_dir = ctx.run_dir if m == 0 else ctx.run_dir / "members" / str(m)
        if m:
            torch.manual_seed(start.seed(m))
        router = start.router(m, queries.features, dev[0] if dev else None)
        logger = ctx.logger if m == 0 else None
        run = TrainingRun(run_dir, config.checkpoint_every, logger, config.logging.progress, dev)
        member = start.trainer(router, queries.features, queries.samples, queries.answers(), grpo, price, m, run)
        history = member.train(resume=resume and (run_dir / "checkpoints").exists())
        runs.append((router, member, history))
    return runs


def run_summary(ctx: RunContext, start: PolicyStart, runs, budget: Budget | None, price) -> dict:
    """What the training asked and spent, for the plugin's metrics and the run's report."""
    counters = [member.counters for _, member, _ in runs]
    summary = {
        "steps": runs[0][1].step,
        "members": start.members,
        "reasoner": ctx.reasoner.fingerprint(),
        "reasoner_where": ctx.reasoner.where,  # what answered (a server: its scoring, text or logprobs)
        "reasoner_calls": budget.spent if budget is not None else sum(c.reasoner_calls for c in counters),
        "naive_reasoner_calls": sum(c.naive_reasoner_calls for c in counters),
        "tool_runs": ctx.pool.computed,
        "naive_tool_runs": sum(c.naive_tool_runs for c in counters),
        "reasoner_failures": ctx.reasoner.failures,
        "unfamiliar_cuts": start.cuts,
        "price": ctx.config.reward.tool_cost,
        "training_price": price,
        "final": runs[0][2][-1] if runs[0][2] else None,
    }
    if start.source is not None:
        summary["init_from"] = {
            "path": str(start.source.directory),
            "content_hash": start.source.manifest["content_hash"],
        }
    return summary


def fit_head(start: PolicyStart, policy, queries: Queries, summary: dict):
    """The zero-shot head: a warm start's travels unchanged (a zero-step run selects as its source); else one
    fitted to what the trained router selects, which scores tools added after training."""
    if start.source is not None:
        return start.source.head
    head = DescriptionHead(start.featurizer.columns, start.descriptions.shape[1])
    dev, features = queries.dev, queries.features
    tuning = (dev[0], policy.select(dev[0])) if dev else None
    summary["zero_shot_head"] = head.fit(features, start.descriptions, policy.select(features), tuning)
    return head


def export(ctx: RunContext, start: PolicyStart, policy, head, queries: Queries, summary: dict) -> RouterDraft:
    """The plugin in memory, with a warm start's back-off, each tool's measured seconds (the dial's latency
    budget) and its average value on the training queries (the fixed-order curve a user could build without
    learning)."""
    values, values_source = None, None  # without a table, each tool alone is asked of every training query:
    if queries.table is not None or ctx.config.eval.cost_curve:  # only when an eval's cost curve is to read them
        values, values_source = tool_values(ctx.tool_ids, queries.samples, queries.table, ctx.reasoner, ctx.records)
    inherited = start.source.manifest.get("tool_seconds") if start.source is not None else None
    backoff = None
    if start.source is not None and start.source.backoff is not None:  # a warm start's travels unchanged
        kept = {k: v for k, v in start.source.manifest["backoff"].items() if k != "config"}
        backoff = (start.source.backoff, kept)
    seconds = tool_seconds(ctx.pool, ctx.tool_ids, inherited)
    parts = RouterParts(policy, start.featurizer, head, seconds, values, values_source, backoff)
    return draft_router(export_target(ctx, summary), parts)


def after_training(ctx: RunContext, trained: TrainedPolicy, phases: Phases) -> None:
    """The back-off, fitted on the plugin in memory (not trained; a warm start keeps its source's), the
    training plot (``training.png``) and, with ``policy.router.table.certify``, the certificate (before the
    evaluation: the plugin's default is the certified point)."""
    config, draft, summary = ctx.config, trained.pending, trained.summary
    if config.policy.router.backoff and not config.policy.init_from:
        with phases("back-off fit"):
            backoff, fitted = fit(draft.open(), ctx.splits.train, ctx.splits.dev, config.policy.router.backoff)
            draft.attach_backoff(backoff, fitted)
        summary["backoff"] = {k: v for k, v in fitted.items() if k != "curve"}

    with phases("training plot"):
        plot_training(ctx.run_dir / "train_log.jsonl", ctx.run_dir / "training.png", ctx.tool_ids)
    if config.policy.router.table.certify.enabled:
        with phases("certification"):
            summary["certificate"] = certify_run(ctx, draft)


class RouterPipeline:
    """The router's :class:`.pipeline.PolicyPipeline`."""

    def train(self, ctx: RunContext, resume: bool) -> TrainedPolicy:
        return train(ctx, resume)

    def after_training(self, ctx: RunContext, trained: TrainedPolicy, phases: Phases) -> None:
        after_training(ctx, trained, phases)

    def evaluated(self, trained: TrainedPolicy, config: RunConfig, more_tools: bool = False):
        """The plugin in memory at ``config``'s operating point, with the tools ``config`` adds."""
        draft: RouterDraft = trained.pending
        return ready_policy(draft.open, draft.manifest, config)

    def write(self, trained: TrainedPolicy, evaluation: dict | None) -> str:
        """The plugin folder, written once with the run's table on its card; its content hash."""
        content = trained.pending.write(evaluation)["content_hash"]
        trained.pending = None
        return content

    def member_seconds(self, ctx: RunContext) -> list[float]:
        """Seconds of each member's GRPO steps, from their training logs."""
        return member_step_seconds(ctx.run_dir, ctx.config.policy.router.ensemble)


PIPELINE = RouterPipeline()

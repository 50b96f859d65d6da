"""``make train`` / ``autagent train``, for both policies:

    data -> tool records (Ray pool + cache) -> train (router: GRPO; lm: TRL) -> plugin -> evaluation

into ``runs/<name>/`` (config, checkpoints, logs, metrics.json, report.md, plots, plugin/).  Each policy
brings a training pipeline (:class:`.pipeline.PolicyPipeline`: :mod:`.router`, :mod:`.lm`): its training,
what it does after training (the router: its back-off fit, training plot and certificate), the plugin the
evaluation scores, the plugin's write and its members' step seconds; lower layers never import this module.

The router's plugin is written once: its back-off is fitted, its certificate made and its evaluation run on
the plugin held in memory, and the folder is written at the end with the card's table (one content hash per
run, the one metrics.json records).  The LM's export writes its model folder itself; its card is rewritten
with the evaluation.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from tools.pool import ToolPool

from ..config import ConfigError, RunConfig, save_config
from ..evaluation.phases import Clock, Phases, timings_of
from ..evaluation.report import markdown_report
from ..policies.lm.plan.report import refusal
from ..reasoners import build_reasoner
from .evaluate import Held, score, wants_values
from .pipeline import PolicyPipeline, TrainedPolicy
from .run import Logger, RunContext, distributed_state, load_splits, record_event, tool_records

log = logging.getLogger("autagent")


def refuse_what_will_not_fit(config: RunConfig) -> None:
    """On CUDA, an LM run the memory plan says will not fit the card stops before any work, naming the
    item that overflows and the nearest settings that fit (``autagent train --force`` skips this)."""
    import torch

    if config.policy.kind != "lm" or config.policy.lm.use_cpu or not torch.cuda.is_available():
        return

    card = torch.cuda.get_device_properties(torch.cuda.current_device())
    message = refusal(config, card.total_memory / 1e9)
    if message:
        raise ConfigError(f"{card.name}, {card.total_memory / 1e9:.1f} GB: {message} (--force starts it anyway)")


def run_train(config: RunConfig, resume: bool = False, force: bool = False, evaluate: bool = True) -> dict | None:
    """The whole main job; returns the test metrics (also in ``runs/<name>/metrics.json``).  Without
    ``evaluate`` (``autagent adapt``) it trains and exports only: no test records, no reasoner answers
    on test items."""
    if not force:
        refuse_what_will_not_fit(config)
    state = distributed_state(config)
    open_run_folder(config, state, resume)
    phases = Phases()
    ctx, clocks = prepare(config, state, phases, evaluate)
    pipeline = policy_recipe(config.policy.kind)
    try:
        with phases("training"):
            trained = pipeline.train(ctx, resume)
        summary = trained.summary
        answers = {"training_asked_s": clocks[0].seconds, "training_computed_s": clocks[1].seconds}
        reasoner = ctx.reasoner
        ctx.record(
            "trained",
            steps=summary.get("steps"),
            reasoner_calls=reasoner.calls,
            reasoner_cache_hits=reasoner.hits,
            reasoner_failures=reasoner.failures,
        )
        if not state.is_main_process:
            return None
        try:
            pipeline.after_training(ctx, trained, phases)
            metrics: dict = {"training": summary, "data_notes": ctx.splits.notes, "data_digest": ctx.splits.digest}
            evaluation = None
            if ctx.splits.test and evaluate:
                with phases("evaluation"):
                    metrics = evaluate_trained(ctx, pipeline, trained) | metrics
                answers |= {
                    "evaluation_asked_s": clocks[0].seconds - answers["training_asked_s"],
                    "evaluation_computed_s": clocks[1].seconds - answers["training_computed_s"],
                }
                evaluation = metrics
        except Exception:
            if trained.pending is not None:  # what was trained is kept: the plugin, without what failed
                pipeline.write(trained, None)
            raise
        with phases("card"):  # the plugin as it ships, its card with the run's table
            content = pipeline.write(trained, evaluation)
        metrics["plugin"] = {"path": str(trained.plugin_dir), "content_hash": content}
        log.info("plugin: %s (content hash %s)", trained.plugin_dir, content)
    finally:
        ctx.reasoner.close()
    metrics["timings"] = timings_of(phases, ctx.pool, answers, pipeline.member_seconds(ctx))
    write_metrics(ctx, metrics)
    return metrics


def policy_recipe(kind: str) -> PolicyPipeline:
    """The training pipeline of ``policy.kind`` (:mod:`.router`, :mod:`.lm`), imported when asked for (the
    LM's imports TRL)."""
    if kind == "lm":
        from .lm import PIPELINE
    else:
        from .router import PIPELINE
    if not isinstance(PIPELINE, PolicyPipeline):
        raise TypeError(f"{kind}'s pipeline does not provide what autagent.recipes.pipeline.PolicyPipeline declares")
    return PIPELINE


def run_started(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run that ``--resume`` continues: a checkpoint, or an answer table stopped
    while asking (its ``budget.json``)."""
    checkpoints = (run_dir / "checkpoints").exists() or any((run_dir / "trainer").glob("checkpoint-*"))
    return checkpoints or (run_dir / "budget.json").exists()


def open_run_folder(config: RunConfig, state, resume: bool) -> None:
    """``runs/<name>/``: refused when it holds a run and ``resume`` is not set, and when ``resume`` is set and it
    holds none (before any tool or reasoner work); the config saved, the start recorded."""
    run_dir = config.run_dir
    if not resume and run_started(run_dir):
        raise FileExistsError(f"{run_dir} already holds a run: use --resume to continue it, or another name")
    if resume and not run_started(run_dir):
        raise FileNotFoundError(f"--resume: {run_dir} holds no checkpoint and no answer table to continue")
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume and state.is_main_process:
        (run_dir / "train_log.jsonl").unlink(missing_ok=True)
    save_config(config, run_dir / "config.yaml")
    record_event(run_dir, state, "started", resume=resume, processes=state.num_processes)


def prepare(config: RunConfig, state, phases: Phases, evaluate: bool) -> tuple[RunContext, tuple[Clock, Clock]]:
    """Data, tool records and the reasoner, into the :class:`RunContext` a policy's recipe gets; and the two
    clocks on the reasoner (every answer asked, the answer cache's included; the answers computed).  Rank 0
    fills the data and tool caches and fetches the reasoner; the others then read them."""
    with state.main_process_first():
        with phases("benchmark generation"):
            splits = load_splits(config)
        if not splits.train:
            raise ConfigError("the training split is empty")
        with phases("tool records"):
            pool = ToolPool(config.tools)
            records = tool_records(config, splits.train + splits.dev + (splits.test if evaluate else []), pool)
        tool_nodes = pool.nodes()
        pool.shutdown()  # every record is cached now: free the tools' memory (GPUs on a cluster) for training
        record_event(config.run_dir, state, "tools", computed=pool.computed, errors=pool.errors, nodes=tool_nodes)
        with phases("reasoner load"):
            reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
        reasoner.inner = computed = Clock(reasoner.inner, ("answer_many",))  # the answers the reasoner computed
        reasoner = asked = Clock(reasoner, ("ask", "answer_many", "answer"))  # and all, the answer cache's included
    logging_config = (
        config
        if state.is_main_process
        else dataclasses.replace(config, logging=dataclasses.replace(config.logging, wandb=False))
    )
    logger = Logger(logging_config)
    ctx = RunContext(config, config.run_dir, splits, records, pool, reasoner, logger, config.tools.tool_ids, state)
    return ctx, (asked, computed)


def evaluate_trained(ctx: RunContext, pipeline: PolicyPipeline, trained: TrainedPolicy) -> dict:
    """The test split's evaluation right after training, with what the run holds (the trained plugin the
    pipeline gives, the splits, the tool records, the reasoner); a transfer run (``eval_reasoner``) also
    scores the training reasoner on its own plugin, and ``eval.add_tools`` the same plugin with more tools."""
    config, splits, run_dir = ctx.config, ctx.splits, ctx.run_dir
    policy = pipeline.evaluated(trained, config)
    train = splits.train[: config.eval.curve_train_queries] if wants_values(config, policy) else []
    test = (splits.test, ctx.records, splits.test_name, ctx.reasoner)
    held = Held(*test, policy, trained.plugin_dir, train, train_records=ctx.records, data_digest=splits.digest)
    if config.eval_reasoner is None:
        metrics = score(config, run_dir, held)
    else:  # transfer: the other reasoner, and the training reasoner on its own plugin
        metrics = with_reasoner(config, run_dir, held)
        metrics["self"] = score(dataclasses.replace(config, eval_reasoner=None), run_dir / "self", held)["methods"]
    if config.eval.add_tools:  # the held-out-tool experiment: the same plugin, more tools
        metrics["added_tools"] = {"tools": list(config.eval.add_tools), "methods": added_tools(ctx, pipeline, trained)}
    return metrics


def added_tools(ctx: RunContext, pipeline: PolicyPipeline, trained: TrainedPolicy) -> dict:
    """The methods' block of the same plugin with ``eval.add_tools`` enabled too, into ``<run>/added/`` (the
    test records computed with those tools; a transfer run's own reasoner)."""
    config, splits = ctx.config, ctx.splits
    tools = dataclasses.replace(config.tools, enabled=[*config.tools.tool_ids, *config.eval.add_tools])
    added = dataclasses.replace(config, tools=tools, eval=dataclasses.replace(config.eval, add_tools=[]))
    more = pipeline.evaluated(trained, added, more_tools=True)
    train = splits.train[: config.eval.curve_train_queries] if wants_values(added, more) else []
    records, train_records = tool_records(added, splits.test), tool_records(added, train) if train else {}
    test = (splits.test, records, splits.test_name, ctx.reasoner)
    held = Held(*test, more, trained.plugin_dir, train, train_records, data_digest=splits.digest)
    out_dir = ctx.run_dir / "added"
    metrics = score(added, out_dir, held) if config.eval_reasoner is None else with_reasoner(added, out_dir, held)
    return metrics["methods"]


def with_reasoner(config: RunConfig, out_dir: Path, held: Held) -> dict:
    """:func:`score` with a reasoner of its own (a transfer run's ``eval_reasoner``), built here and closed."""
    reasoner = build_reasoner(config.eval_reasoner, config.answer_cache_dir, config.tools.max_seconds)
    try:
        return score(config, out_dir, dataclasses.replace(held, reasoner=reasoner))
    finally:
        reasoner.close()


def write_metrics(ctx: RunContext, metrics: dict) -> None:
    """metrics.json, and with an evaluation report.md and the test accuracies to the logger."""
    (ctx.run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if "methods" in metrics:
        (ctx.run_dir / "report.md").write_text(markdown_report(metrics))  # the evaluation's, and the phase table
        ctx.logger.log({f"test/{name}": m["accuracy"] for name, m in metrics["methods"].items()})
    ctx.logger.finish()

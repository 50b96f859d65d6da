"""``autagent eval``: every baseline and the plugin's policy on a test split, into a folder of outputs
(metrics.json, report.md, plots); also the last step of ``autagent train``."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.pool import ToolPool

from ..api import load, run_tools
from ..config import ConfigError, RunConfig
from ..data.sample import Sample
from ..evaluation.cost_curve import cost_curve
from ..evaluation.harness import AGENTIC_METHODS, evaluate, run_method, write_outputs
from ..evaluation.summary import price_check, tool_error_counts
from ..plugin.dial import Dial, recorded_seconds, set_dial, tool_seconds_of
from ..plugin.manifest import read_manifest
from ..policies.router.costs import tool_values
from ..reasoners import build_reasoner
from ..reasoners.tool_loop import AgenticRun, EndpointCaller, build_caller
from .run import Logger, load_splits, tool_records

log = logging.getLogger("autagent")


def ready_policy(open_plugin, manifest: dict, config: RunConfig):
    """The plugin an evaluation scores, at the run's operating point: ``open_plugin(extra_tools)`` gives it
    once the plugin's tools have become the run's (``config.tools`` is updated in place; see
    :func:`autagent.api.run_tools`), then ``eval.uncertified`` and the dial (``eval.tools``, ``max_tools``,
    ``latency_budget_ms``) are set on it."""
    config.tools, extra = run_tools(config.tools, manifest)
    plugin = open_plugin(extra)
    if config.eval.uncertified and hasattr(plugin, "dial"):
        plugin.dial = None
    return set_dial(plugin, Dial(config.eval.max_tools, config.eval.latency_budget_ms, config.eval.tools))


def load_policy(plugin_dir, config: RunConfig, expected_sha256: str | None = None):
    """The plugin in ``plugin_dir``, loaded and verified, ready to score (:func:`ready_policy`); None without one."""
    if plugin_dir is None:
        return None

    def open_plugin(extra):
        tools = config.tools
        return load(
            plugin_dir,
            tools_profile=tools.profile,
            tool_settings=tools.settings,
            expected_sha256=expected_sha256,
            extra_tools=extra,
        )

    return ready_policy(open_plugin, read_manifest(plugin_dir, expected_sha256), config)


def agentic_run(config: RunConfig, reasoner_config, reasoner):
    """The agentic methods' loop: the caller ``eval.agentic.caller`` names, the run's tool pool for calls
    that name a window, as many items at once as an endpoint takes (one for the scripted caller)."""
    try:
        caller = build_caller(config.eval.agentic, reasoner_config, reasoner)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    concurrency = reasoner_config.openai.max_concurrency if isinstance(caller, EndpointCaller) else 1
    return AgenticRun(caller, config.eval.agentic.max_rounds, ToolPool(config.tools), concurrency)


@dataclass
class Held:
    """What one scoring of a test split works from, all of it in hand: ``autagent eval`` prepares it
    (:func:`run_eval`), a training run hands what it already holds (``recipes/train.py:evaluate_trained``)."""

    samples: list[Sample]
    """The test items scored."""
    records: dict
    """Every enabled tool's record per scorable test item."""
    dataset_name: str
    """The test split's name, in the report and metrics.json."""
    reasoner: object
    """Answers every method; left open (whoever built it closes it)."""
    policy: object | None = None
    """The plugin at its operating point (:func:`ready_policy`); None scores the baselines alone."""
    plugin_dir: str | Path | None = None
    """Where that plugin is (or, in a training run, will be written), recorded in metrics.json."""
    train: list[Sample] = field(default_factory=list)
    """The cost curve's training queries for a plugin that records no tool values (empty: no fixed order
    measured for such a plugin)."""
    train_records: dict = field(default_factory=dict)
    """Those queries' tool records (apart from ``records``: a dataset's ids may repeat across splits)."""
    data_digest: str | None = None
    """The embedded benchmark's recorded SHA-256 (``Splits.digest``), in metrics.json; None for files."""


def run_eval(
    config: RunConfig,
    out_dir: str | Path,
    plugin_dir: str | Path | None = None,
    log_to_wandb: bool = False,
    expected_sha256: str | None = None,
) -> dict:
    """``autagent eval``: prepares what a scoring needs (the test split, the plugin in ``plugin_dir`` loaded
    and verified, the tool records, the reasoner, and for a plugin without tool values the cost curve's
    training queries), then :func:`score`; the reasoner built here is closed here."""
    splits = load_splits(config, need_train=False)
    if not splits.test:
        raise ConfigError("nothing to evaluate: no test split (set data.test, or use the embedded benchmark)")
    policy = load_policy(plugin_dir, config, expected_sha256)  # a bad plugin is refused before any work
    records = tool_records(config, splits.test)
    train = training_queries(config) if wants_values(config, policy) else []
    train_records = tool_records(config, train) if train else {}
    reasoner = build_reasoner(
        config.eval_reasoner or config.reasoner, config.answer_cache_dir, config.tools.max_seconds
    )
    held = Held(
        splits.test, records, splits.test_name, reasoner, policy, plugin_dir, train, train_records, splits.digest
    )
    try:
        metrics = score(config, out_dir, held)
    finally:
        reasoner.close()
    if log_to_wandb:
        logger = Logger(config, out_dir)
        block = metrics["methods"]
        logger.log(
            {f"eval/{name}/accuracy": m["accuracy"] for name, m in block.items()}
            | {f"eval/{name}/avg_tools": m["avg_tools"] for name, m in block.items()}
        )
        logger.finish()
    return metrics


def score(config: RunConfig, out_dir: str | Path, held: Held) -> dict:
    """Every baseline (and the plugin's policy) on ``held``'s test items, with what it holds (nothing loaded,
    built or computed beside the answers); writes the harness outputs and returns their metrics."""
    samples, records, reasoner, policy = held.samples, held.records, held.reasoner, held.policy
    policy_select = policy.select_many if policy is not None else None
    tool_ids = config.tools.tool_ids
    reasoner_config = config.eval_reasoner or config.reasoner
    started = time.perf_counter()
    methods = evaluated_methods(config, policy)
    oracle_size = config.eval.oracle_max_size or (None if len(tool_ids) <= 8 else 2)
    agentic = agentic_run(config, reasoner_config, reasoner) if set(methods) & set(AGENTIC_METHODS) else None
    block, results = evaluate(
        samples,
        records,
        reasoner,
        methods,
        tool_ids,
        policy_select,
        config.eval.random_seed,
        config.eval.desc_margin,
        config.eval.desc_floor,
        oracle_size,
        config.logging.progress,
        agentic,
    )
    answered_s, computed = time.perf_counter() - started, reasoner.calls
    add_seconds(block, results, policy, answered_s / computed if computed else None)
    curve = dial_curve(config, held, block)
    extra = run_facts(config, held, block)
    extra |= {"eval_seconds": round(time.perf_counter() - started, 1), **({"cost_curve": curve} if curve else {})}
    if reasoner.failures > config.eval.max_failed_answers:  # a broken run is not read as a bad model
        last = getattr(reasoner, "last_failure", None)
        extra["incomplete"] = {"failed_answers": reasoner.failures, "calls": reasoner.calls, "last_failure": last}
    label = reasoner_config.kind + ":" + reasoner.name
    figures = (samples, block, results, tool_ids, config.eval.plots, extra)
    return write_outputs(out_dir, held.dataset_name or "dataset", label, *figures)


def evaluated_methods(config: RunConfig, policy) -> list[str]:
    """``eval.methods``, less ``policy`` without a plugin."""
    return list(config.eval.methods) if policy is not None else [m for m in config.eval.methods if m != "policy"]


def add_seconds(block: dict, results: dict, policy, answer_s: float | None) -> None:
    """Each method's tool-seconds per answer (one by one: the sum of its tools' seconds; side by side on the
    pool: the slowest), from the seconds per clip the plugin measured at export (none without a plugin or
    for a plugin exported before them), and its seconds end to end (selection, tools side by side, one
    answer at this eval's measured seconds per computed answer), as FDB-v3 reports per stage."""
    seconds = recorded_seconds(policy.manifest) if policy is not None else {}
    for name, result in results.items():
        spent = tool_seconds_of(result.subsets, seconds) if seconds else None
        if spent is None:
            continue
        block[name]["tool_seconds"] = spent
        if answer_s is not None:
            select_s = block[name].get("select_seconds", 0.0)
            block[name]["end_to_end_s"] = round(select_s + spent["parallel"] + answer_s, 4)


def curves(config: RunConfig, plugin) -> bool:
    """Whether this evaluation draws the accuracy-against-tools curve: a router plugin scored by ``policy``."""
    scored = plugin is not None and "policy" in evaluated_methods(config, plugin)
    return bool(config.eval.cost_curve and scored and hasattr(plugin, "scores_many"))


def dial_curve(config: RunConfig, held: Held, block: dict) -> dict | None:
    """The accuracy-against-tools curve of a router plugin (``eval.cost_curve``), None otherwise."""
    plugin, reasoner, samples, records = held.policy, held.reasoner, held.samples, held.records
    if not (curves(config, plugin) and "policy" in block):
        return None

    def run(subsets):
        return run_method(reasoner, samples, records, subsets)

    tool_ids = config.tools.tool_ids
    values = None
    if not plugin.manifest.get("tool_values") and held.train:  # each tool's gain alone, on the training queries
        values = tool_values(tool_ids, held.train, None, reasoner, held.train_records)
    return cost_curve(plugin, samples, run, tool_ids, block, values, config.eval.curve_max_k)


def wants_values(config: RunConfig, plugin) -> bool:
    """Whether the curve's fixed order is measured here: the curve drawn for a plugin that records no tool
    values (exported before the dial), on ``eval.curve_train_queries`` training queries (0: never)."""
    return bool(config.eval.curve_train_queries and curves(config, plugin) and not plugin.manifest.get("tool_values"))


def training_queries(config: RunConfig) -> list[Sample]:
    """The first ``eval.curve_train_queries`` training queries of the run's data (never the test items):
    the fixed order is measured on them with the eval's reasoner; none without a training split."""
    try:
        return load_splits(config).train[: config.eval.curve_train_queries]
    except ConfigError:
        return []


def run_facts(config: RunConfig, held: Held, block: dict) -> dict:
    """What metrics.json says beside the accuracies: the data's digest, what answered and how often, the
    tools' errors, the price check and the plugin evaluated (its content hash None while a training run
    holds it unwritten: the run's metrics.json records the hash it is written with)."""
    reasoner, samples, records, policy = held.reasoner, held.samples, held.records, held.policy
    facts = {
        "data_digest": held.data_digest,
        "reasoner_fingerprint": reasoner.fingerprint(),
        "reasoner_where": getattr(reasoner, "where", reasoner.name),  # a server: its scoring, text or logprobs
        "reasoner_calls": reasoner.calls,
        "reasoner_cache_hits": reasoner.hits,
        "reasoner_failures": reasoner.failures,
        "tool_errors": tool_error_counts(samples, records),
        "price_check": price_check(block, config.reward.tool_cost),
    }
    if policy is not None:
        facts["plugin"] = {"path": str(held.plugin_dir), "content_hash": policy.manifest.get("content_hash")}
    return facts

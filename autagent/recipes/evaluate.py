"""``autagent eval``: every baseline and the plugin's policy on a test split, into a folder of outputs
(metrics.json, report.md, plots); also the last step of ``autagent train``."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from tools.pool import ToolPool

from ..config import ConfigError, RunConfig
from ..data.sample import Sample
from ..evaluation.cost_curve import cost_curve
from ..evaluation.harness import AGENTIC_METHODS, evaluate, run_method, write_outputs
from ..evaluation.summary import price_check, tool_error_counts
from ..plugin.dial import Dial, recorded_seconds, set_dial, tool_seconds_of
from ..plugin.manifest import read_manifest
from ..policies.router.costs import tool_values
from ..reasoners.tool_loop import AgenticRun, EndpointCaller, build_caller
from .run import Logger, data_digest, load_splits, tool_records

log = logging.getLogger("autagent")


def ready_policy(open_plugin, manifest: dict, config: RunConfig):
    """The plugin an evaluation scores, at the run's operating point: ``open_plugin(extra_tools)`` gives it
    once the plugin's tools have become the run's (``config.tools`` is updated in place; see
    :func:`autagent.api.run_tools`), then ``eval.uncertified`` and the dial (``eval.tools``, ``max_tools``,
    ``latency_budget_ms``) are set on it."""
    # looked up when called, not at import: a test patches it on its module
    from ..api import run_tools

    config.tools, extra = run_tools(config.tools, manifest)
    plugin = open_plugin(extra)
    if config.eval.uncertified and hasattr(plugin, "dial"):
        plugin.dial = None
    return set_dial(plugin, Dial(config.eval.max_tools, config.eval.latency_budget_ms, config.eval.tools))


def load_policy(plugin_dir, config: RunConfig, expected_sha256: str | None = None):
    """The plugin in ``plugin_dir``, loaded and verified, ready to score (:func:`ready_policy`); None without one."""
    if plugin_dir is None:
        return None
    # looked up when called, not at import: a test patches it on its module
    from ..api import load

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


def run_eval(
    config: RunConfig,
    out_dir: str | Path,
    plugin_dir: str | Path | None = None,
    samples: list[Sample] | None = None,
    records: dict | None = None,
    dataset_name: str | None = None,
    log_to_wandb: bool = False,
    expected_sha256: str | None = None,
    policy=None,
    reasoner=None,
) -> dict:
    """Every baseline (and the plugin's policy) on the test split; writes the harness outputs.

    ``policy`` and ``reasoner``, when given, are used as they are (right after training: the trained plugin,
    not yet written, and the reasoner already in memory) instead of loading the plugin in ``plugin_dir`` and
    building a reasoner; ``policy`` is a plugin object (``select_many``, ``manifest``) at its operating point
    (:func:`ready_policy`); a reasoner passed in is left open for the caller."""
    # looked up when called, not at import: a test patches it on its module
    from ..reasoners import build_reasoner

    if samples is None:
        splits = load_splits(config, need_train=False)
        samples, dataset_name = splits.test, splits.test_name
    if not samples:
        raise ConfigError("nothing to evaluate: no test split (set data.test, or use the embedded benchmark)")
    if policy is None:  # refuse a bad plugin before any work
        policy = load_policy(plugin_dir, config, expected_sha256)
    policy_select = policy.select_many if policy is not None else None
    tool_ids = config.tools.tool_ids
    records = records if records is not None else tool_records(config, samples)
    reasoner_config = config.eval_reasoner or config.reasoner
    owned = reasoner is None
    if owned:
        reasoner = build_reasoner(reasoner_config, config.answer_cache_dir, config.tools.max_seconds)
    started = time.perf_counter()
    methods = list(config.eval.methods) if policy is not None else [m for m in config.eval.methods if m != "policy"]
    oracle_size = config.eval.oracle_max_size or (None if len(tool_ids) <= 8 else 2)
    try:
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
        curve = dial_curve(config, policy, block, reasoner, samples, records)
    finally:
        if owned:
            reasoner.close()
    extra = run_facts(config, reasoner, samples, records, block, plugin_dir, policy)
    extra |= {"eval_seconds": round(time.perf_counter() - started, 1), **({"cost_curve": curve} if curve else {})}
    if reasoner.failures > config.eval.max_failed_answers:  # a broken run is not read as a bad model
        last = getattr(reasoner, "last_failure", None)
        extra["incomplete"] = {"failed_answers": reasoner.failures, "calls": reasoner.calls, "last_failure": last}
    metrics = write_outputs(
        out_dir,
        dataset_name or "dataset",
        reasoner_config.kind + ":" + reasoner.name,
        samples,
        block,
        results,
        tool_ids,
        config.eval.plots,
        extra,
    )
    if log_to_wandb:
        logger = Logger(config, out_dir)
        logger.log(
            {f"eval/{name}/accuracy": m["accuracy"] for name, m in block.items()}
            | {f"eval/{name}/avg_tools": m["avg_tools"] for name, m in block.items()}
        )
        logger.finish()
    return metrics


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


def dial_curve(config: RunConfig, plugin, block: dict, reasoner, samples, records) -> dict | None:
    """The accuracy-against-tools curve of a router plugin (``eval.cost_curve``), None otherwise."""
    if not (config.eval.cost_curve and "policy" in block and hasattr(plugin, "scores_many")):
        return None

    def run(subsets):
        return run_method(reasoner, samples, records, subsets)

    tool_ids = config.tools.tool_ids
    values = None if plugin.manifest.get("tool_values") else training_values(config, reasoner, tool_ids)
    return cost_curve(plugin, samples, run, tool_ids, block, values, config.eval.curve_max_k)


def training_values(config: RunConfig, reasoner, tool_ids) -> tuple[dict, str] | None:
    """For a plugin that records no tool values (exported before the dial): each tool's average gain alone
    on the first ``eval.curve_train_queries`` training queries of the run's data, asked of this reasoner
    (the fixed order of the cost curve; never the test items); None without a training split."""
    if not config.eval.curve_train_queries:
        return None
    try:
        train = load_splits(config).train[: config.eval.curve_train_queries]
    except ConfigError:
        return None
    return tool_values(tool_ids, train, None, reasoner, tool_records(config, train)) if train else None


def run_facts(config: RunConfig, reasoner, samples, records, block: dict, plugin_dir, policy) -> dict:
    """What metrics.json says beside the accuracies: the data's digest, what answered and how often, the
    tools' errors, the price check and the plugin evaluated (its content hash None while a training run
    holds it unwritten: the run's metrics.json records the hash it is written with)."""
    facts = {
        "data_digest": data_digest(config),
        "reasoner_fingerprint": reasoner.fingerprint(),
        "reasoner_where": getattr(reasoner, "where", reasoner.name),  # a server: its scoring, text or logprobs
        "reasoner_calls": reasoner.calls,
        "reasoner_cache_hits": reasoner.hits,
        "reasoner_failures": reasoner.failures,
        "tool_errors": tool_error_counts(samples, records),
        "price_check": price_check(block, config.reward.tool_cost),
    }
    if policy is not None:
        facts["plugin"] = {"path": str(plugin_dir), "content_hash": policy.manifest.get("content_hash")}
    return facts

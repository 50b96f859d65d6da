"""The one recipe behind ``make train`` and ``autagent train|eval``, for both policies:

    data -> tool records (Ray pool + cache) -> train (router: GRPO here; lm: TRL) -> plugin -> evaluation

into ``runs/<name>/`` (config, checkpoints, logs, metrics.json, report.md, plots, plugin/).  The
policies plug in a training step (:func:`autagent.policies.router.recipe.train_router`,
:func:`autagent.policies.lm.recipe.train_lm`); lower layers never import this module.

Data: a config that names dataset files never generates the embedded benchmark; with no dev file
``data.dev_fraction`` of train is held out (seeded, logged), or dev evaluation is skipped (logged).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from tools.pool import ToolPool

from .config import ConfigError, RunConfig, save_config, to_dict
from .data.sample import Sample
from .evaluation.phases import Clock, Phases, per_router_steps, timings_of

log = logging.getLogger("autagent")


@dataclass
class Splits:
    train: list[Sample]
    dev: list[Sample]
    test: list[Sample]
    test_name: str
    notes: list[str] = field(default_factory=list)


def _load(path, config: RunConfig, limit, what: str, notes: list[str]) -> list[Sample]:
    from .data.loaders import load

    loaded = load(path, config.data.format, limit, config.data.audio_wording, clip_check(config.tools.max_seconds))
    note = f"{what}: {path} ({loaded.format}), {len(loaded.scorable)} of {loaded.rows} rows usable"
    if loaded.rejected:
        first = loaded.rejected[0]
        note += f", {len(loaded.rejected)} unscorable (first: row {first['row']}: {first['reason']})"
    notes.append(note)
    return loaded.samples if what == "test" else loaded.scorable


def clip_check(max_seconds: float | None):
    """What a dataset row's clip must pass to be scored: present, not empty, decodable (the part the tools
    hear, the first ``max_seconds``); a clip that fails makes its row unscorable, named in the report."""
    from functools import partial

    from tools.audio import decode

    return partial(decode, max_seconds=max_seconds)


def load_splits(config: RunConfig, need_train: bool = True) -> Splits:
    data, notes = config.data, []
    if data.uses_files:
        if need_train and not data.train:
            raise ConfigError(
                "data.train is required for training when any dataset file is named "
                "(the embedded benchmark is only used when no file is)"
            )
        paths = {
            "train": data.train if need_train else None,
            "dev": data.dev if need_train else None,
            "test": data.test,
        }
    else:
        from .data.generator import generate

        generated = generate(data.benchmark, progress=config.logging.progress)
        paths = {k: str(generated[k]) if k in generated else None for k in ("train", "dev", "test")}
        paths = {k: (v if need_train or k == "test" else None) for k, v in paths.items()}
        notes.append(f"embedded benchmark: {data.benchmark.root} (seed {data.benchmark.seed})")
    limits = {"train": data.limit_train, "dev": data.limit_dev, "test": data.limit_test}
    loaded = {k: _load(p, config, limits[k], k, notes) if p else [] for k, p in paths.items()}
    if need_train and not paths["dev"]:
        if data.dev_fraction > 0 and len(loaded["train"]) > 1:
            import numpy as np

            order = np.random.default_rng(data.dev_seed).permutation(len(loaded["train"]))
            cut = max(1, int(round(len(order) * data.dev_fraction)))
            dev_ids = set(order[:cut].tolist())
            loaded["dev"] = [s for i, s in enumerate(loaded["train"]) if i in dev_ids]
            loaded["train"] = [s for i, s in enumerate(loaded["train"]) if i not in dev_ids]
            notes.append(
                f"dev: {cut} rows held out of train (data.dev_fraction {data.dev_fraction}, seed {data.dev_seed})"
            )
        else:
            notes.append("dev: none (no dev file, data.dev_fraction 0): dev evaluation is skipped")
    if not paths["test"]:
        notes.append("test: none: the run trains and exports, and evaluates nothing")
    for note in notes:
        log.info(note)
    return Splits(
        loaded["train"], loaded["dev"], loaded["test"], Path(paths["test"]).stem if paths["test"] else "", notes
    )


def tool_records(config: RunConfig, samples: list[Sample], pool: ToolPool | None = None) -> dict[str, dict]:
    """Every enabled tool's record for every scorable sample (computed once, then served from the cache)."""
    pool = pool or ToolPool(config.tools)
    scorable = [s for s in samples if not s.meta.get("unscorable")]
    unique = sorted({s.audio for s in scorable})
    by_path = dict(zip(unique, pool.run_many(unique, progress=config.logging.progress)))
    return {s.id: by_path[s.audio] for s in scorable}


class Logger:
    """W&B (offline by default) when enabled; otherwise nothing beyond train_log.jsonl.  The config
    logged is the run's own, which holds no secret (keys are only ever read from the environment).

    Its run is written under ``folder`` (default the run's folder; ``eval --out DIR``'s is DIR), and
    W&B's own messages (its banner, the run history and summary, the sync hint) are silenced: one line
    says where the run is (its folder; online, its page)."""

    def __init__(self, config: RunConfig, folder: str | Path | None = None):
        self.run = None
        if config.logging.wandb and config.logging.wandb_mode != "disabled":
            import wandb

            # W&B advertises its Weave tracer on stderr whenever the openai SDK is imported (the openai
            # reasoner and the service import it): not ours to print.
            os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")
            folder = Path(folder or config.run_dir)
            folder.mkdir(parents=True, exist_ok=True)
            self.run = wandb.init(
                project=config.logging.project,
                name=config.name,
                mode=config.logging.wandb_mode,
                dir=str(folder),
                config=to_dict(config),
                reinit="finish_previous",
                settings=wandb.Settings(silent=True),  # failures still raise; its ~35 lines of chatter go
            )
            if self.run is not None and not self.run.disabled:
                online = config.logging.wandb_mode == "online" and self.run.url
                where = self.run.url if online else Path(self.run.dir).parent
                log.info("W&B run (%s): %s", config.logging.wandb_mode, where)

    def log(self, metrics: dict, step: int | None = None) -> None:
        if self.run is not None:
            self.run.log(metrics, step=step)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()


@dataclass
class RunContext:
    """What a policy's training step gets from the recipe."""

    config: RunConfig
    run_dir: Path
    splits: Splits
    records: dict
    pool: ToolPool
    reasoner: object
    logger: Logger
    tool_ids: tuple
    state: object
    """accelerate's process state (or a single-process stand-in): rank, main process, process count."""

    @property
    def config_dict(self) -> dict:
        return to_dict(self.config)

    def record(self, event: str, **fields) -> None:
        record_event(self.run_dir, self.state, event, **fields)


def record_event(run_dir: Path, state, event: str, **fields) -> None:
    """One line in ``<run>/events.jsonl`` (rank, pid, time, what happened): every rank appends to the
    same file (short lines with O_APPEND are written whole), so a run's history survives a kill."""
    import os

    row = {"event": event, "rank": state.process_index, "pid": os.getpid(), "time": round(time.time(), 3), **fields}
    with open(run_dir / "events.jsonl", "a") as handle:
        handle.write(json.dumps(row) + "\n")


def build_policy_select(plugin_dir, config: RunConfig, expected_sha256: str | None = None):
    """The plugin's ``select_many``, after the plugin's tools have become the run's (``config.tools`` is
    updated in place; see :func:`autagent.api.run_tools`)."""
    if plugin_dir is None:
        return None
    from .api import load, run_tools
    from .plugin.dial import Dial, set_dial
    from .plugin.manifest import read_manifest

    config.tools, extra = run_tools(config.tools, read_manifest(plugin_dir, expected_sha256))
    plugin = load(
        plugin_dir,
        tools_profile=config.tools.profile,
        tool_settings=config.tools.settings,
        expected_sha256=expected_sha256,
        extra_tools=extra,
    )
    return set_dial(plugin, Dial(config.eval.max_tools, config.eval.latency_budget_ms)).select_many


def agentic_run(config: RunConfig, reasoner_config, reasoner):
    """The agentic methods' loop: the caller ``eval.agentic.caller`` names, the run's tool pool for calls
    that name a window, as many items at once as an endpoint takes (one for the scripted caller)."""
    from .reasoners.tool_loop import AgenticRun, EndpointCaller, build_caller

    try:
        caller = build_caller(config.eval.agentic, reasoner_config, reasoner)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    concurrency = reasoner_config.openai.max_concurrency if isinstance(caller, EndpointCaller) else 1
    return AgenticRun(caller, config.eval.agentic.max_rounds, ToolPool(config.tools), concurrency)


def training_values(config: RunConfig, reasoner, tool_ids) -> tuple[dict, str] | None:
    """For a plugin that records no tool values (exported before the dial): each tool's average gain alone
    on the first ``eval.curve_train_queries`` training queries of the run's data, asked of this reasoner
    (the fixed order of the cost curve; never the test items); None without a training split."""
    from .policies.router.costs import tool_values

    if not config.eval.curve_train_queries:
        return None
    try:
        train = load_splits(config).train[: config.eval.curve_train_queries]
    except ConfigError:
        return None
    return tool_values(tool_ids, train, None, reasoner, tool_records(config, train)) if train else None


def run_eval(
    config: RunConfig,
    out_dir: str | Path,
    plugin_dir: str | Path | None = None,
    samples: list[Sample] | None = None,
    records: dict | None = None,
    dataset_name: str | None = None,
    log_to_wandb: bool = False,
    expected_sha256: str | None = None,
    policy_select=None,
    reasoner=None,
) -> dict:
    """Every baseline (and the plugin's policy) on the test split; writes the harness outputs.

    ``policy_select`` and ``reasoner``, when given, are used as they are (right after training: the
    trained model and the reasoner already in memory) instead of loading the plugin and building a
    reasoner; a reasoner passed in is left open for the caller."""
    from .evaluation.harness import AGENTIC_METHODS, evaluate, price_check, tool_error_counts, write_outputs
    from .reasoners import build_reasoner

    if samples is None:
        splits = load_splits(config, need_train=False)
        samples, dataset_name = splits.test, splits.test_name
    if not samples:
        raise ConfigError("nothing to evaluate: no test split (set data.test, or use the embedded benchmark)")
    if policy_select is None:  # refuse a bad plugin before any work
        policy_select = build_policy_select(plugin_dir, config, expected_sha256)
    tool_ids = config.tools.tool_ids
    records = records if records is not None else tool_records(config, samples)
    reasoner_config = config.eval_reasoner or config.reasoner
    owned = reasoner is None
    if owned:
        reasoner = build_reasoner(reasoner_config, config.answer_cache_dir, config.tools.max_seconds)
    started = time.perf_counter()
    methods = list(config.eval.methods) if plugin_dir else [m for m in config.eval.methods if m != "policy"]
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
        curve = None
        plugin = getattr(policy_select, "__self__", None)  # the loaded plugin whose select_many this is
        if config.eval.cost_curve and "policy" in block and hasattr(plugin, "scores_many"):
            from .evaluation.cost_curve import cost_curve
            from .evaluation.harness import run_method

            run = lambda subsets: run_method(reasoner, samples, records, subsets)  # noqa: E731
            values = None if plugin.manifest.get("tool_values") else training_values(config, reasoner, tool_ids)
            curve = cost_curve(plugin, samples, run, tool_ids, block, values)
    finally:
        if owned:
            reasoner.close()
    extra = {
        "reasoner_fingerprint": reasoner.fingerprint(),
        "reasoner_where": getattr(
            reasoner, "where", reasoner.name
        ),  # what answered (a server: its scoring, text or logprobs)
        "eval_seconds": round(time.perf_counter() - started, 1),
        "reasoner_calls": reasoner.calls,
        "reasoner_cache_hits": reasoner.hits,
        "reasoner_failures": reasoner.failures,
        "tool_errors": tool_error_counts(samples, records),
        "price_check": price_check(block, config.reward.tool_cost),
        **({"cost_curve": curve} if curve else {}),
    }
    if plugin_dir:
        extra["plugin"] = {
            "path": str(plugin_dir),
            "content_hash": json.loads((Path(plugin_dir) / "manifest.json").read_text())["content_hash"],
        }
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


def distributed_state(config: RunConfig | None = None):
    """accelerate's process state under ``accelerate launch`` (gloo between CPU ranks when there is no
    GPU, or the LM trains on the CPU); a single-process stand-in otherwise."""
    import os

    if "LOCAL_RANK" in os.environ:
        import torch
        from accelerate import PartialState

        use_cpu = config is not None and config.policy.kind == "lm" and config.policy.lm.use_cpu
        return PartialState(cpu=use_cpu or not torch.cuda.is_available())
    return type(
        "Single",
        (),
        {
            "is_main_process": True,
            "process_index": 0,
            "num_processes": 1,
            "main_process_first": staticmethod(nullcontext),
        },
    )()


def refuse_what_will_not_fit(config: RunConfig) -> None:
    """On CUDA, an LM run the memory plan says will not fit the card stops before any work, naming the
    item that overflows and the nearest settings that fit (``autagent train --force`` skips this)."""
    import torch

    if config.policy.kind != "lm" or config.policy.lm.use_cpu or not torch.cuda.is_available():
        return
    from .policies.lm.plan.report import refusal

    card = torch.cuda.get_device_properties(torch.cuda.current_device())
    message = refusal(config, card.total_memory / 1e9)
    if message:
        raise ConfigError(f"{card.name}, {card.total_memory / 1e9:.1f} GB: {message} (--force starts it anyway)")


def run_train(config: RunConfig, resume: bool = False, force: bool = False, evaluate: bool = True) -> dict | None:
    """The whole main job; returns the test metrics (also in ``runs/<name>/metrics.json``).  Without
    ``evaluate`` (``autagent adapt``) it trains and exports only: no test records, no reasoner answers
    on test items."""
    from .reasoners import build_reasoner

    if not force:
        refuse_what_will_not_fit(config)
    state = distributed_state(config)
    run_dir = config.run_dir
    started_before = (run_dir / "checkpoints").exists() or any((run_dir / "trainer").glob("checkpoint-*"))
    started_before = started_before or (run_dir / "budget.json").exists()  # a table run stopped while asking
    if not resume and started_before:
        raise FileExistsError(f"{run_dir} already holds a run: use --resume to continue it, or another name")
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume and state.is_main_process:
        (run_dir / "train_log.jsonl").unlink(missing_ok=True)
    save_config(config, run_dir / "config.yaml")
    record_event(run_dir, state, "started", resume=resume, processes=state.num_processes)
    phases = Phases()
    with (
        state.main_process_first()
    ):  # rank 0 fills the data and tool caches, and fetches the reasoner; the others then read them
        with phases("benchmark generation"):
            splits = load_splits(config)
        if not splits.train:
            raise ConfigError("the training split is empty")
        with phases("tool records"):
            pool = ToolPool(config.tools)
            records = tool_records(config, splits.train + splits.dev + (splits.test if evaluate else []), pool)
        tool_nodes = pool.nodes()
        pool.shutdown()  # every record is cached now: free the tools' memory (GPUs on a cluster) for training
        record_event(run_dir, state, "tools", computed=pool.computed, errors=pool.errors, nodes=tool_nodes)
        with phases("reasoner load"):
            reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
        reasoner.inner = computed = Clock(reasoner.inner, ("answer_many",))  # the answers the reasoner computed
        reasoner = asked = Clock(reasoner, ("ask", "answer_many", "answer"))  # and all, the answer cache's included
    logger = (
        Logger(config)
        if state.is_main_process
        else Logger(dataclasses.replace(config, logging=dataclasses.replace(config.logging, wandb=False)))
    )
    context = RunContext(config, run_dir, splits, records, pool, reasoner, logger, config.tools.tool_ids, state)
    if config.policy.kind == "lm":
        from .policies.lm.recipe import train_lm as train_step
    else:
        from .policies.router.recipe import train_router as train_step
    try:
        with phases("training"):
            plugin_dir, summary, selector = train_step(context, resume)
        answers = {"training_asked_s": asked.seconds, "training_computed_s": computed.seconds}
        record_event(
            run_dir,
            state,
            "trained",
            steps=summary.get("steps"),
            reasoner_calls=reasoner.calls,
            reasoner_cache_hits=reasoner.hits,
            reasoner_failures=reasoner.failures,
        )
        if not state.is_main_process:
            return None
        fit = config.policy.kind == "router" and config.policy.router.backoff and not config.policy.init_from
        if fit:  # fitted on the plugin, not trained (a warm start keeps its source's)
            from .policies.router.backoff_fit import fit_backoff

            with phases("back-off fit"):
                fitted = fit_backoff(plugin_dir, splits.train, splits.dev, config.policy.router.backoff)
            summary["backoff"] = {k: v for k, v in fitted.items() if k != "curve"}
        if config.policy.kind == "router":
            from .evaluation.plots import plot_training

            with phases("training plot"):
                plot_training(run_dir / "train_log.jsonl", run_dir / "training.png", config.tools.tool_ids)
        metrics: dict = {"training": summary, "data_notes": splits.notes}
        if splits.test and evaluate:
            t0 = time.perf_counter()
            select = selector.select_many if selector is not None else None
            own = {"policy_select": select, "reasoner": reasoner}  # evaluate with what is already loaded
            test = (splits.test, records, splits.test_name)
            if config.eval_reasoner is None:
                metrics = run_eval(config, run_dir, plugin_dir, *test, **own) | metrics
            else:  # transfer: the other reasoner, and the training reasoner on its own plugin
                metrics = run_eval(config, run_dir, plugin_dir, *test, policy_select=select) | metrics
                self_config = dataclasses.replace(config, eval_reasoner=None)
                metrics["self"] = run_eval(self_config, run_dir / "self", plugin_dir, *test, **own)["methods"]
            if config.eval.add_tools:  # the held-out-tool experiment: the same plugin, more tools
                tools = dataclasses.replace(config.tools, enabled=[*config.tools.tool_ids, *config.eval.add_tools])
                added = dataclasses.replace(config, tools=tools, eval=dataclasses.replace(config.eval, add_tools=[]))
                metrics["added_tools"] = {
                    "tools": list(config.eval.add_tools),
                    "methods": run_eval(
                        added,
                        run_dir / "added",
                        plugin_dir,
                        splits.test,
                        None,
                        splits.test_name,
                        reasoner=reasoner if config.eval_reasoner is None else None,
                    )["methods"],
                }
            phases.add("evaluation", time.perf_counter() - t0)
            answers |= {"evaluation_asked_s": asked.seconds, "evaluation_computed_s": computed.seconds}
            answers["evaluation_asked_s"] -= answers["training_asked_s"]
            answers["evaluation_computed_s"] -= answers["training_computed_s"]
        from .plugin.manifest import update_card

        with phases("card"):  # the card gains the run's table
            content = update_card(plugin_dir, metrics if splits.test and evaluate else None)
        metrics["plugin"] = {"path": str(plugin_dir), "content_hash": content}
        log.info("plugin: %s (content hash %s)", plugin_dir, content)
    finally:
        reasoner.close()
    routers = per_router_steps(run_dir, config.policy.router.ensemble) if config.policy.kind == "router" else []
    metrics["timings"] = timings_of(phases, pool, answers, routers)
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if "methods" in metrics:
        from .evaluation.report import markdown_report

        (run_dir / "report.md").write_text(markdown_report(metrics))  # the evaluation's, and the phase table
        logger.log({f"test/{name}": m["accuracy"] for name, m in metrics["methods"].items()})
    logger.finish()
    return metrics

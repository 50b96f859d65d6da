"""The one recipe behind ``make train`` and ``autagent train|eval``, for both policies:

    data -> tool records (Ray pool + cache) -> train (router: GRPO here; lm: TRL) -> plugin -> evaluation

into ``runs/<name>/`` (config, checkpoints, logs, metrics.json, report.md, plots, plugin/).  The
policies plug in a training step (:func:`autagent.train.train_router`,
:func:`autagent.policies.lm.recipe.train_lm`); lower layers never import this module.

Data: a config that names dataset files never generates the embedded benchmark; with no dev file
``data.dev_fraction`` of train is held out (seeded, logged), or dev evaluation is skipped (logged).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from tools.pool import ToolPool

from .config import ConfigError, RunConfig, save_config, to_dict
from .data.sample import Sample

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

    loaded = load(path, config.data.format, limit, config.data.audio_wording)
    note = f"{what}: {path} ({loaded.format}), {len(loaded.scorable)} of {loaded.rows} rows usable"
    if loaded.rejected:
        note += f", {len(loaded.rejected)} unscorable (first: row {loaded.rejected[0]['row']}: {loaded.rejected[0]['reason']})"
    notes.append(note)
    return loaded.samples if what == "test" else loaded.scorable


def load_splits(config: RunConfig, need_train: bool = True) -> Splits:
    data, notes = config.data, []
    if data.uses_files:
        if need_train and not data.train:
            raise ConfigError("data.train is required for training when any dataset file is named "
                              "(the embedded benchmark is only used when no file is)")
        paths = {"train": data.train if need_train else None, "dev": data.dev if need_train else None, "test": data.test}
    else:
        from .data.bench import generate

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
            notes.append(f"dev: {cut} rows held out of train (data.dev_fraction {data.dev_fraction}, seed {data.dev_seed})")
        else:
            notes.append("dev: none (no dev file, data.dev_fraction 0): dev evaluation is skipped")
    if not paths["test"]:
        notes.append("test: none: the run trains and exports, and evaluates nothing")
    for note in notes:
        log.info(note)
    return Splits(loaded["train"], loaded["dev"], loaded["test"], Path(paths["test"]).stem if paths["test"] else "", notes)


def tool_records(config: RunConfig, samples: list[Sample], pool: ToolPool | None = None) -> dict[str, dict]:
    """Every enabled tool's record for every scorable sample (computed once, then served from the cache)."""
    pool = pool or ToolPool(config.tools)
    scorable = [s for s in samples if not s.meta.get("unscorable")]
    unique = sorted({s.audio for s in scorable})
    by_path = dict(zip(unique, pool.run_many(unique, progress=config.logging.progress)))
    return {s.id: by_path[s.audio] for s in scorable}


class Logger:
    """W&B (offline by default) when enabled; otherwise nothing beyond train_log.jsonl.  The config
    logged is the run's own, which holds no secret (keys are only ever read from the environment)."""

    def __init__(self, config: RunConfig):
        self.run = None
        if config.logging.wandb and config.logging.wandb_mode != "disabled":
            import wandb

            config.run_dir.mkdir(parents=True, exist_ok=True)
            self.run = wandb.init(project=config.logging.project, name=config.name, mode=config.logging.wandb_mode,
                                  dir=str(config.run_dir), config=to_dict(config), reinit="finish_previous")

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

    @property
    def config_dict(self) -> dict:
        return to_dict(self.config)


def build_policy_select(plugin_dir, config: RunConfig, expected_sha256: str | None = None):
    if plugin_dir is None:
        return None
    from .plugin import load

    plugin = load(plugin_dir, tools_profile=config.tools.profile, tool_settings=config.tools.settings,
                  expected_sha256=expected_sha256)
    missing = [t for t in plugin.tools if t not in config.tools.tool_ids]
    if missing:
        raise ConfigError(f"the plugin selects tools this run does not enable: {missing}; add them to tools.enabled")
    return plugin.select_many


def run_eval(config: RunConfig, out_dir: str | Path, plugin_dir: str | Path | None = None,
             samples: list[Sample] | None = None, records: dict | None = None, dataset_name: str | None = None,
             log_to_wandb: bool = False, expected_sha256: str | None = None) -> dict:
    """Every baseline (and the plugin's policy) on the test split; writes the harness outputs."""
    from .evaluate import evaluate, tool_error_counts, write_outputs
    from .reasoners import build_reasoner

    if samples is None:
        splits = load_splits(config, need_train=False)
        samples, dataset_name = splits.test, splits.test_name
    if not samples:
        raise ConfigError("nothing to evaluate: no test split (set data.test, or use the embedded benchmark)")
    policy_select = build_policy_select(plugin_dir, config, expected_sha256)  # refuse a bad plugin before any work
    tool_ids = config.tools.tool_ids
    records = records if records is not None else tool_records(config, samples)
    reasoner_config = config.eval_reasoner or config.reasoner
    reasoner = build_reasoner(reasoner_config, config.answer_cache_dir, config.tools.max_seconds)
    started = time.perf_counter()
    methods = list(config.eval.methods) if plugin_dir else [m for m in config.eval.methods if m != "policy"]
    oracle_size = config.eval.oracle_max_size or (None if len(tool_ids) <= 8 else 2)
    try:
        block, results = evaluate(samples, records, reasoner, methods, tool_ids, policy_select, config.eval.random_seed,
                                  config.eval.desc_margin, config.eval.desc_floor, oracle_size, config.logging.progress)
    finally:
        reasoner.close()
    extra = {"reasoner_fingerprint": reasoner.fingerprint(), "eval_seconds": round(time.perf_counter() - started, 1),
             "reasoner_calls": reasoner.calls, "reasoner_cache_hits": reasoner.hits,
             "reasoner_failures": reasoner.failures, "tool_errors": tool_error_counts(samples, records)}
    if plugin_dir:
        extra["plugin"] = {"path": str(plugin_dir),
                           "content_hash": json.loads((Path(plugin_dir) / "manifest.json").read_text())["content_hash"]}
    metrics = write_outputs(out_dir, dataset_name or "dataset", reasoner_config.kind + ":" + reasoner.name, samples,
                            block, results, tool_ids, config.eval.plots, extra)
    if log_to_wandb:
        logger = Logger(config)
        logger.log({f"eval/{name}/accuracy": m["accuracy"] for name, m in block.items()}
                   | {f"eval/{name}/avg_tools": m["avg_tools"] for name, m in block.items()})
        logger.finish()
    return metrics


def distributed_state():
    """accelerate's process state under ``accelerate launch``; a single-process stand-in otherwise."""
    import os

    if "LOCAL_RANK" in os.environ:
        from accelerate import PartialState

        return PartialState()
    return type("Single", (), {"is_main_process": True, "main_process_first": staticmethod(nullcontext)})()


def run_train(config: RunConfig, resume: bool = False) -> dict | None:
    """The whole main job; returns the test metrics (also in ``runs/<name>/metrics.json``)."""
    from .reasoners import build_reasoner

    state = distributed_state()
    run_dir = config.run_dir
    started_before = (run_dir / "checkpoints").exists() or any((run_dir / "trainer").glob("checkpoint-*"))
    if not resume and started_before:
        raise FileExistsError(f"{run_dir} already holds a run: use --resume to continue it, or another name")
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        (run_dir / "train_log.jsonl").unlink(missing_ok=True)
    save_config(config, run_dir / "config.yaml")
    timings: dict[str, float] = {}
    with state.main_process_first():  # rank 0 fills the data, tool and answer caches; the others then read them
        t0 = time.perf_counter()
        splits = load_splits(config)
        timings["data_s"] = time.perf_counter() - t0
        if not splits.train:
            raise ConfigError("the training split is empty")
        t0 = time.perf_counter()
        pool = ToolPool(config.tools)
        records = tool_records(config, splits.train + splits.dev + splits.test, pool)
        timings["tools_s"] = time.perf_counter() - t0
        reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
    logger = Logger(config) if state.is_main_process else Logger(dataclasses.replace(config, logging=dataclasses.replace(
        config.logging, wandb=False)))
    context = RunContext(config, run_dir, splits, records, pool, reasoner, logger, config.tools.tool_ids)
    t0 = time.perf_counter()
    if config.policy.kind == "lm":
        from .policies.lm.recipe import train_lm as train_step
    else:
        from .train import train_router as train_step
    try:
        plugin_dir, summary = train_step(context, resume)
    finally:
        reasoner.close()
    timings["train_s"] = time.perf_counter() - t0
    if not state.is_main_process:
        return None
    log.info("plugin: %s (content hash %s)", plugin_dir,
             json.loads((Path(plugin_dir) / "manifest.json").read_text())["content_hash"])
    metrics: dict = {"training": summary, "data_notes": splits.notes}
    if splits.test:
        t0 = time.perf_counter()
        metrics = run_eval(config, run_dir, plugin_dir, splits.test, records, splits.test_name) | metrics
        if config.eval_reasoner is not None:  # transfer: also the training reasoner on its own plugin
            self_config = dataclasses.replace(config, eval_reasoner=None)
            metrics["self"] = run_eval(self_config, run_dir / "self", plugin_dir, splits.test, records,
                                       splits.test_name)["methods"]
        timings["eval_s"] = time.perf_counter() - t0
    metrics["timings"] = {k: round(v, 1) for k, v in timings.items()}
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if "methods" in metrics:
        logger.log({f"test/{name}": m["accuracy"] for name, m in metrics["methods"].items()})
    logger.finish()
    return metrics

"""The main job behind ``make train`` and ``autagent train|eval``: one config, one run directory.

``train``: data (the embedded benchmark is generated if absent) -> tool records for every clip
(Ray pool + cache) -> GRPO on the router -> plugin export -> evaluation of every baseline and the
trained policy on the test split -> ``runs/<name>/`` (config, checkpoints, logs, metrics.json,
report.md, plots, plugin/).
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

from tools.pool import ToolPool

from .config import RunConfig, save_config, to_dict
from .data.embedded import generate
from .data.loaders import load_dataset
from .data.sample import Sample
from .report import plot_training


@dataclass
class Splits:
    train: list[Sample]
    dev: list[Sample]
    test: list[Sample]
    test_name: str


def load_splits(config: RunConfig, need_train: bool = True) -> Splits:
    data = config.data
    paths = {"train": data.train, "dev": data.dev, "test": data.test}
    if any(p is None for name, p in paths.items() if need_train or name == "test"):
        generated = generate(data.benchmark, progress=config.logging.progress)
        paths = {k: v or (str(generated[k]) if k in generated else None) for k, v in paths.items()}
    limits = {"train": data.limit_train, "dev": data.limit_dev, "test": data.limit_test}
    loaded = {k: load_dataset(p, data.format, limits[k]) if p else [] for k, p in paths.items()}
    return Splits(loaded["train"], loaded["dev"], loaded["test"], Path(paths["test"]).stem if paths["test"] else "")


def tool_records(config: RunConfig, samples: list[Sample], pool: ToolPool | None = None) -> dict[str, dict]:
    """Every tool's record for every sample (computed once, then served from the cache)."""
    pool = pool or ToolPool(config.tools)
    unique = sorted({s.audio for s in samples})
    by_path = dict(zip(unique, pool.run_many(unique, progress=config.logging.progress)))
    return {s.id: by_path[s.audio] for s in samples}


class Logger:
    """W&B (offline by default) when enabled and importable; otherwise nothing beyond train_log.jsonl."""

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


def build_policy_select(plugin_dir: str | Path | None, config: RunConfig):
    if plugin_dir is None:
        return None
    from .plugin import load

    plugin = load(plugin_dir, tools_profile=config.tools.profile, tool_settings=config.tools.settings)
    return plugin.select_many


def run_eval(config: RunConfig, out_dir: str | Path, plugin_dir: str | Path | None = None,
             samples: list[Sample] | None = None, records: dict | None = None, dataset_name: str | None = None,
             log_to_wandb: bool = False) -> dict:
    """Every baseline (and the plugin's policy) on the test split; writes the harness outputs
    (and, with ``log_to_wandb``, a W&B run with the accuracy table when logging is enabled)."""
    from .evaluate import evaluate, write_outputs
    from .reasoners import build_reasoner

    if samples is None:
        splits = load_splits(config, need_train=False)
        samples, dataset_name = splits.test, splits.test_name
    records = records or tool_records(config, samples)
    reasoner_config = config.eval_reasoner or config.reasoner
    reasoner = build_reasoner(reasoner_config, config.answer_cache_dir, config.tools.max_seconds)
    started = time.perf_counter()
    methods = list(config.eval.methods) if plugin_dir else [m for m in config.eval.methods if m != "policy"]
    block, results = evaluate(samples, records, reasoner, methods, build_policy_select(plugin_dir, config),
                              config.eval.random_seed, config.eval.desc_margin, config.eval.desc_floor,
                              progress=config.logging.progress)
    reasoner.close()
    extra = {"reasoner_fingerprint": reasoner.fingerprint(), "eval_seconds": round(time.perf_counter() - started, 1),
             "reasoner_calls": reasoner.calls, "reasoner_cache_hits": reasoner.hits}
    if plugin_dir:
        extra["plugin"] = str(plugin_dir)
    metrics = write_outputs(out_dir, dataset_name or "dataset", reasoner_config.kind + ":" + reasoner.name, samples,
                            block, results, config.eval.plots, extra)
    if log_to_wandb:
        logger = Logger(config)
        logger.log({f"eval/{name}/accuracy": m["accuracy"] for name, m in block.items()}
                   | {f"eval/{name}/avg_tools": m["avg_tools"] for name, m in block.items()})
        logger.finish()
    return metrics


def run_train(config: RunConfig, resume: bool = False) -> dict:
    """The whole main job; returns the test metrics (also in ``runs/<name>/metrics.json``)."""
    import torch

    from .plugin import export_router
    from .policies.router import Featurizer, Router
    from .reasoners import build_reasoner
    from .train import RouterTrainer

    if config.policy.kind == "lm":
        from .policies.lm import run_lm_train

        return run_lm_train(config, resume)
    torch.manual_seed(config.seed)
    run_dir = config.run_dir
    if not resume and (run_dir / "checkpoints").exists():
        raise FileExistsError(f"{run_dir} already holds a run: use --resume to continue it, or another name")
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        (run_dir / "train_log.jsonl").unlink(missing_ok=True)
    save_config(config, run_dir / "config.yaml")
    timings = {}
    t0 = time.perf_counter()
    splits = load_splits(config)
    timings["data_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pool = ToolPool(config.tools)
    records = tool_records(config, splits.train + splits.dev + splits.test, pool)
    timings["tools_s"] = time.perf_counter() - t0
    reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
    featurizer = Featurizer(config.policy.router)
    t0 = time.perf_counter()
    features = featurizer.of_samples(splits.train)
    dev = (featurizer.of_samples(splits.dev), splits.dev) if splits.dev else None
    policy = Router(featurizer.dim, config.policy.router)
    logger = Logger(config)
    trainer = RouterTrainer(policy, features, splits.train, records, reasoner, config.grpo, config.reward.kind,
                            config.reward.tool_cost, run_dir, config.seed, config.checkpoint_every, dev,
                            logger=logger, progress=config.logging.progress)
    history = trainer.train(resume=resume)
    timings["train_s"] = time.perf_counter() - t0
    reasoner.close()
    counters = trainer.counters
    training_summary = {"steps": trainer.step, "reasoner_calls": counters.reasoner_calls,
                        "naive_reasoner_calls": counters.naive_reasoner_calls,
                        "tool_runs": pool.computed, "naive_tool_runs": counters.naive_tool_runs,
                        "final": history[-1] if history else None}
    plugin_dir = export_router(run_dir / "plugin", policy, featurizer, config.tools.profile, config.tools.settings,
                               config.tools.max_seconds, to_dict(config), {"training": training_summary})
    t0 = time.perf_counter()
    metrics = run_eval(config, run_dir, plugin_dir, splits.test, records, splits.test_name)
    if config.eval_reasoner is not None:  # transfer: also the training reasoner on its own plugin
        self_config = dataclasses.replace(config, eval_reasoner=None)
        metrics["self"] = run_eval(self_config, run_dir / "self", plugin_dir, splits.test, records, splits.test_name)["methods"]
    timings["eval_s"] = time.perf_counter() - t0
    metrics["training"] = training_summary
    metrics["timings"] = {k: round(v, 1) for k, v in timings.items()}
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    plot_training(run_dir / "train_log.jsonl", run_dir / "training.png")
    logger.log({f"test/{name}": m["accuracy"] for name, m in metrics["methods"].items()})
    logger.finish()
    return metrics

"""What every recipe shares: the run's splits (dataset files, or the embedded benchmark generated on first
use), the tool records, the run's logger and event log, the context a policy's training step gets, and the
process state under ``accelerate launch``.

Data: a config that names dataset files never generates the embedded benchmark; with no dev file
``data.dev_fraction`` of train is held out (seeded, logged), or dev evaluation is skipped (logged).
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from tools.audio import decode
from tools.pool import ToolPool

from ..config import ConfigError, RunConfig, to_dict
from ..data.generator import generate, recorded_digest
from ..data.loaders import load
from ..data.sample import Sample

log = logging.getLogger("autagent")


@dataclass
class Splits:
    train: list[Sample]
    dev: list[Sample]
    test: list[Sample]
    test_name: str
    notes: list[str] = field(default_factory=list)
    digest: str | None = None
    """The embedded benchmark's recorded SHA-256 (:func:`data_digest`), read once its files are made;
    None for dataset files."""


def _load(path, config: RunConfig, limit, what: str, notes: list[str]) -> list[Sample]:
    check = clip_check(config.tools.max_seconds)
    loaded = load(path, config.data.format, limit, config.data.audio_wording, check)
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

    return partial(decode, max_seconds=max_seconds)


def load_splits(config: RunConfig, need_train: bool = True) -> Splits:
    data, notes, digest = config.data, [], None
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
        generated = generate(data.benchmark, progress=config.logging.progress)
        digest = recorded_digest(data.benchmark.root)
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
    test_name = Path(paths["test"]).stem if paths["test"] else ""
    return Splits(loaded["train"], loaded["dev"], loaded["test"], test_name, notes, digest)


def data_digest(config: RunConfig) -> str | None:
    """The embedded benchmark's recorded SHA-256 (its ``digest.json``), so that a run's metrics.json says
    which bytes its figures come from; None for dataset files (their folders are not the project's)."""
    if config.data.uses_files:
        return None

    return recorded_digest(config.data.benchmark.root)


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

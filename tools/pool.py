"""The tool pool: one Ray actor per tool, subsets run in parallel, every result cached on disk.

``ToolPool.run(path, tools)`` answers from the cache where it can and sends the rest to the tools'
actors at once, so a 4-tool subset costs about its slowest tool.  Each call has a timeout; an
actor that dies is restarted and the call retried once; a clip that cannot be read yields an
``"error"`` record for each tool and never an exception, so a batch always completes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from . import TOOL_IDS, ToolRunner, get_tool, make_record
from .audio import AudioError, content_hash
from .cache import ToolCache


@dataclass
class PoolConfig:
    """How tools run: profile and per-tool settings, the cache, and the Ray resources of each actor."""

    profile: str = "embedded"
    settings: dict = field(default_factory=dict)  # tool id -> backend setting overrides (model_id, device...)
    max_seconds: float = 30.0
    cache_dir: str = ".cache/tools"
    executor: str = "ray"  # "ray" (actors) or "local" (in this process, sequential)
    timeout_s: float = 300.0  # a call fails (error record, actor restarted) when no call finishes for this long
    actor_cpus: float = 0.25
    gpu_fraction: dict = field(default_factory=dict)  # tool id -> GPUs per actor, e.g. {"asr": 0.5}
    replicas: dict = field(default_factory=dict)  # tool id -> number of actors (default 1), e.g. {"asr": 2}
    ray_address: str | None = None  # None: start a local Ray; "auto": join the cluster of `ray start --head`

    def __post_init__(self):
        if self.executor not in ("ray", "local"):
            raise ValueError(f"tools.executor must be 'ray' or 'local', got {self.executor!r}")
        for tool_id in list(self.settings) + list(self.gpu_fraction) + list(self.replicas):
            get_tool(tool_id)
        for tool_id, count in self.replicas.items():
            if not isinstance(count, int) or count < 1:
                raise ValueError(f"tools.replicas.{tool_id} must be a positive integer, got {count!r}")


def _actor_class():
    import ray

    @ray.remote
    class ToolActor:
        """Holds one tool's loaded model for the life of the actor."""

        def __init__(self, tool_id: str, profile: str, settings: dict, max_seconds: float):
            os.environ.setdefault("OMP_NUM_THREADS", "1")
            self.tool_id = tool_id
            self.runner = ToolRunner(profile, settings, max_seconds)

        def run(self, path: str) -> dict:
            return self.runner.run(self.tool_id, path)

        def pid(self) -> int:
            return os.getpid()

    return ToolActor


class ToolPool:
    def __init__(self, config: PoolConfig | None = None):
        self.config = config or PoolConfig()
        self.cache = ToolCache(self.config.cache_dir)
        self.runner = ToolRunner(self.config.profile, self.config.settings, self.config.max_seconds)
        self._actors: dict[str, object] = {}
        self.restarts = 0
        self.computed = 0

    # -- actors ---------------------------------------------------------------------------------
    def _ensure_ray(self):
        import ray

        if not ray.is_initialized():
            runtime_env = {"env_vars": {"OMP_NUM_THREADS": "1"}}
            if self.config.ray_address:
                ray.init(address=self.config.ray_address, log_to_driver=False, runtime_env=runtime_env)
            else:
                ray.init(num_cpus=max(os.cpu_count() or 1, 1), include_dashboard=False, log_to_driver=False,
                         configure_logging=False, ignore_reinit_error=True, runtime_env=runtime_env)
        return ray

    def actor(self, tool_id: str, replica: int = 0):
        key = (tool_id, replica % self.config.replicas.get(tool_id, 1))
        if key not in self._actors:
            self._ensure_ray()
            self._actors[key] = _actor_class().options(
                num_cpus=self.config.actor_cpus, num_gpus=self.config.gpu_fraction.get(tool_id, 0),
                max_restarts=0).remote(tool_id, self.config.profile, self.config.settings, self.config.max_seconds)
        return self._actors[key]

    def restart(self, tool_id: str, replica: int = 0) -> None:
        """Kill (if still alive) and forget one actor of ``tool_id``; the next call starts a fresh one."""
        import ray

        actor = self._actors.pop((tool_id, replica % self.config.replicas.get(tool_id, 1)), None)
        if actor is not None:
            ray.kill(actor, no_restart=True)
        self.restarts += 1

    def shutdown(self) -> None:
        import ray

        for key in list(self._actors):
            ray.kill(self._actors.pop(key), no_restart=True)

    # -- calls ----------------------------------------------------------------------------------
    def _key(self, audio_hash: str, tool_id: str) -> tuple[str, str, str, str]:
        return (audio_hash, tool_id, *self.runner.identity(tool_id))

    def run(self, path: str, tools: Iterable[str] = TOOL_IDS) -> dict[str, dict]:
        """Records for ``tools`` on one clip, from the cache or computed in parallel."""
        return self.run_many([path], tools)[0]

    def run_many(self, paths: list[str], tools: Iterable[str] = TOOL_IDS, progress: bool = False) -> list[dict[str, dict]]:
        """Records for every (clip, tool); all cache misses are in flight at once across the actors."""
        tools = [t for t in TOOL_IDS if t in set(tools)]
        results: list[dict[str, dict]] = [{} for _ in paths]
        pending: list[tuple[int, str, tuple]] = []
        for i, path in enumerate(paths):
            try:
                audio_hash = content_hash(path)
            except AudioError as err:
                for tool_id in tools:
                    results[i][tool_id] = make_record(tool_id, *self.runner.identity(tool_id), error=str(err))
                continue
            for tool_id in tools:
                key = self._key(audio_hash, tool_id)
                cached = self.cache.get(*key)
                if cached is not None:
                    results[i][tool_id] = cached
                else:
                    pending.append((i, tool_id, key))
        bar = _progress(len(pending), progress)
        compute = self._compute_local if self.config.executor == "local" else self._compute_ray
        for i, tool_id, key, record in compute([(i, tool_id, paths[i], key) for i, tool_id, key in pending]):
            self.cache.put(*key, record)
            self.computed += 1
            results[i][tool_id] = record
            bar.update(1)
        bar.close()
        return [{t: r[t] for t in tools} for r in results]

    def _compute_local(self, jobs):
        for i, tool_id, path, key in jobs:
            yield i, tool_id, key, self.runner.run(tool_id, path)

    def _compute_ray(self, jobs):
        ray = self._ensure_ray()
        from ray.exceptions import RayActorError

        per_tool: dict[str, int] = {}
        in_flight = {}
        for i, tool_id, path, key in jobs:  # spread each tool's calls over its replicas in turn
            n = per_tool[tool_id] = per_tool.get(tool_id, -1) + 1
            in_flight[self.actor(tool_id, n).run.remote(path)] = (i, tool_id, path, key, 0, n)
        while in_flight:
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=self.config.timeout_s)
            if not done:  # nothing finished within the timeout: fail the oldest call and restart its actor
                ref = next(iter(in_flight))
                i, tool_id, path, key, _, n = in_flight.pop(ref)
                yield i, tool_id, key, make_record(tool_id, *key[2:], error=f"{path}: timed out after {self.config.timeout_s}s")
                in_flight = self._resubmit_after_restart(tool_id, n, in_flight)
                continue
            ref = done[0]
            i, tool_id, path, key, attempt, n = in_flight.pop(ref)
            try:
                yield i, tool_id, key, ray.get(ref)
            except RayActorError as err:
                if attempt >= 1:
                    yield i, tool_id, key, make_record(tool_id, *key[2:], error=f"{path}: tool actor died twice: {err}")
                in_flight = self._resubmit_after_restart(tool_id, n, in_flight)
                if attempt < 1:
                    in_flight[self.actor(tool_id, n).run.remote(path)] = (i, tool_id, path, key, attempt + 1, n)

    def _resubmit_after_restart(self, tool_id: str, replica: int, in_flight: dict) -> dict:
        """Restart one actor of ``tool_id`` and re-queue the calls it still held on the new one."""
        count = self.config.replicas.get(tool_id, 1)
        if (tool_id, replica % count) not in self._actors:
            return in_flight
        self.restart(tool_id, replica)
        kept = {}
        for ref, (i, tid, path, key, attempt, n) in in_flight.items():
            if tid == tool_id and n % count == replica % count:
                kept[self.actor(tool_id, n).run.remote(path)] = (i, tid, path, key, attempt, n)
            else:
                kept[ref] = (i, tid, path, key, attempt, n)
        return kept


def _progress(total: int, enabled: bool):
    from autagent.progress import progress

    return progress(total=total, desc="tools", unit="call", disable=not enabled or total == 0)

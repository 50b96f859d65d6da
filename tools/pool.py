"""The tool pool: Ray actors per tool, batched calls, every result cached on disk.

``ToolPool.run_many(paths, tools)`` answers from the cache where it can and keeps every tool's actors
busy with the rest, in per-tool batches (a backend that can batch, such as the embedded ASR, sees the
whole batch; each actor has one batch in flight), so a subset costs about its slowest tool.

Fault tolerance is Ray's own: actors are created with ``max_restarts`` and ``max_task_retries``,
so an actor that dies (OOM, SIGKILL, a segfaulting library) is restarted and the call it was
running re-run once. On top of that, a *no-progress* timeout turns a hung call into an error record,
cancels it (so Ray does not run it again) and kills the actor so Ray restarts it. A clip that cannot
be read gets an ``"error"`` record for each tool, never an exception: a batch always completes and
every clip is accounted for.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from . import ToolRunner, make_record
from .audio import AudioError, content_hash
from .cache import ToolCache
from .clip_window import Window, cut
from .numba_cache import warm_librosa
from .pool_config import PoolConfig
from .ray_actors import _actor_class, _quiet_auth_notice

__all__ = ["PoolConfig", "ToolPool", "_quiet_auth_notice"]  # PoolConfig's home is .pool_config


class ToolPool:
    def __init__(self, config: PoolConfig | None = None):
        self.config = config or PoolConfig()
        self.tool_ids = self.config.tool_ids
        cap = self.config.cache_max_mb
        self.cache = ToolCache(self.config.cache_dir, None if cap is None else int(cap * 2**20))
        self.runner = ToolRunner(self.config.profile, self.config.settings, self.config.max_seconds)
        self._actors: dict[tuple[str, int], object] = {}
        self.computed = 0
        self.errors: dict[str, int] = {}  # tool id -> error records returned (bad clips, failing models, timeouts)
        # tool id -> seconds its computed calls took, summed over its calls and replicas (an actor's start-up
        # and model load are in its first call), and the seconds after the first call was sent when its last
        # call came back; the phase table of a run (autagent/evaluation/phases.py)
        self.seconds: dict[str, float] = {}
        self.clips: dict[str, int] = {}  # tool id -> clips its computed calls covered (seconds per clip: the dial's)
        self.done_at: dict[str, float] = {}
        self.ray_start_s = 0.0
        self._started = time.perf_counter()

    # -- actors ---------------------------------------------------------------------------------
    def _ensure_ray(self):
        import ray

        started = time.perf_counter()
        # librosa's kernels compiled here, once, before actors that would compile them together (a race
        # that corrupts numba's cache: tools/numba_cache.py)
        warm_librosa()
        if not ray.is_initialized():
            # Workers import this project and any tools.extra module the way this process does.
            path = os.pathsep.join(p for p in sys.path if p)
            runtime_env = {"env_vars": {"OMP_NUM_THREADS": "1", "PYTHONPATH": path}}
            if self.config.ray_address:
                ray.init(address=self.config.ray_address, log_to_driver=False, runtime_env=runtime_env)
            else:
                # "local": a new Ray of our own even when another process left one running on this
                # machine (ray.init's default would join it, then refuse num_cpus)
                _quiet_auth_notice()
                ray.init(
                    address="local",
                    num_cpus=max(os.cpu_count() or 1, 1),
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    ignore_reinit_error=True,
                    runtime_env=runtime_env,
                )
        self.ray_start_s += time.perf_counter() - started
        return ray

    def _replica(self, tool_id: str, batch: int) -> tuple[str, int]:
        """Which of ``tool_id``'s actors takes its ``batch``-th batch (round robin over its replicas)."""
        return tool_id, batch % self.config.replicas.get(tool_id, 1)

    def actor(self, tool_id: str, replica: int = 0):
        key = self._replica(tool_id, replica)
        if key not in self._actors:
            self._ensure_ray()
            self._actors[key] = (
                _actor_class()
                .options(
                    num_cpus=self.config.actor_cpus,
                    num_gpus=self.config.gpu_fraction.get(tool_id, 0),
                    max_restarts=self.config.max_restarts,
                    max_task_retries=self.config.max_task_retries,
                    scheduling_strategy="SPREAD" if self.config.scheduling == "spread" else "DEFAULT",
                )
                .remote(
                    tool_id,
                    self.config.profile,
                    self.config.settings,
                    self.config.max_seconds,
                    list(self.config.extra),
                    self.config.ray_address is not None,
                )
            )
        return self._actors[key]

    def nodes(self) -> dict[str, str]:
        """``"<tool>#<replica>" -> Ray node id`` of every actor this pool started (empty without Ray)."""
        if not self._actors:
            return {}
        import ray

        return {f"{tool}#{replica}": ray.get(actor.node_id.remote()) for (tool, replica), actor in self._actors.items()}

    def shutdown(self) -> None:
        """Kill this pool's actors (their models' memory is freed); later misses start new ones."""
        if not self._actors:
            return
        import ray

        for key in list(self._actors):
            ray.kill(self._actors.pop(key), no_restart=True)

    # -- calls ----------------------------------------------------------------------------------
    def _key(self, audio_hash: str, tool_id: str) -> tuple[str, str, str, str]:
        return (audio_hash, tool_id, *self.runner.identity(tool_id))

    def run(self, path: str, tools: Iterable[str] | None = None, window: Window | None = None) -> dict[str, dict]:
        """Records for ``tools`` (default: the run's library) on one clip, from the cache or computed;
        with a ``window``, on that part of the clip only."""
        return self.run_many([path], tools, window=window)[0]

    def run_many(
        self,
        paths: list[str],
        tools: Iterable[str] | None = None,
        progress: bool = False,
        window: Window | None = None,
    ) -> list[dict[str, dict]]:
        """Records for every (clip, tool); the cache misses run on all the tools' actors at once.
        With a ``window`` the tools see that part of each clip (cut to a file of its own), and the
        records are cached under the clip's content and the window."""
        wanted = set(self.tool_ids if tools is None else tools)
        tools = [t for t in self.tool_ids if t in wanted] + sorted(wanted - set(self.tool_ids))
        if window is not None:
            return self._run_window(paths, tools, window, progress)
        return self._run(paths, tools, progress)

    def _run_window(self, paths: list[str], tools: list[str], window: Window, progress: bool) -> list[dict]:
        cuts: dict[int, Path] = {}

        def source(i: int) -> str:  # the window, cut only for a clip some tool has no cached record of
            if i not in cuts:
                cuts[i] = cut(paths[i], window, Path(self.config.cache_dir) / ".windows", self.config.max_seconds)
            return str(cuts[i])

        try:
            results = self._run(paths, tools, progress, window, source)
        finally:
            for path in cuts.values():
                path.unlink(missing_ok=True)
        for i, records in enumerate(results):
            for tool_id, record in records.items():
                record = records[tool_id] = {**record, "window": window.as_dict()}
                if "error" in record and i in cuts:  # name the clip and the window, not the cut's file
                    record["error"] = record["error"].replace(str(cuts[i]), window.label(paths[i]))
        return results

    def _run(self, paths, tools, progress, window: Window | None = None, source=None) -> list[dict[str, dict]]:
        results: list[dict[str, dict]] = [{} for _ in paths]
        pending: dict[str, list[tuple[int, tuple]]] = {}
        sources = list(paths)
        for i, path in enumerate(paths):
            try:
                audio_hash = content_hash(path) + (window.suffix if window else "")
            except AudioError as err:
                for tool_id in tools:
                    results[i][tool_id] = self._count(
                        make_record(tool_id, *self.runner.identity(tool_id), error=str(err))
                    )
                continue
            for tool_id in tools:
                key = self._key(audio_hash, tool_id)
                cached = self.cache.get(*key)
                if cached is not None:
                    results[i][tool_id] = cached
                else:
                    pending.setdefault(tool_id, []).append((i, key))
        if source is not None:
            for i in sorted({i for jobs in pending.values() for i, _ in jobs}):
                try:
                    sources[i] = source(i)
                except AudioError as err:  # the window is not in the clip: an error record per tool
                    for tool_id in tools:
                        pending[tool_id] = [job for job in pending.get(tool_id, []) if job[0] != i]
                        if tool_id not in results[i]:
                            record = make_record(tool_id, *self.runner.identity(tool_id), error=str(err))
                            results[i][tool_id] = self._count(record)
            pending = {t: jobs for t, jobs in pending.items() if jobs}
        if pending and progress and self.config.executor == "ray":
            self._ensure_ray()  # before the bar: Ray's start is not a tool call (the bar says how long it took)
        bar = _progress(sum(len(v) for v in pending.values()), progress) if pending else None  # none: all cached
        if bar is not None and self.ray_start_s:
            bar.set_postfix_str(f"Ray started in {self.ray_start_s:.1f} s", refresh=False)
        compute = self._compute_local if self.config.executor == "local" else self._compute_ray
        self._started = time.perf_counter()
        for i, tool_id, key, record in compute(pending, sources) if pending else ():
            self.cache.put(*key, record)
            self.computed += "error" not in record
            self.clips[tool_id] = self.clips.get(tool_id, 0) + 1
            results[i][tool_id] = self._count(record)
            bar.update(1)
        if bar is not None:
            bar.close()
        return [{t: r[t] for t in tools} for r in results]

    def _timed(self, tool_id: str, sent: float) -> None:
        """A call of ``tool_id`` sent at ``sent`` came back now."""
        now = time.perf_counter()
        self.seconds[tool_id] = self.seconds.get(tool_id, 0.0) + now - sent
        self.done_at[tool_id] = max(self.done_at.get(tool_id, 0.0), now - self._started)

    def _count(self, record: dict) -> dict:
        if "error" in record:
            self.errors[record["tool"]] = self.errors.get(record["tool"], 0) + 1
        return record

    def _batches(self, pending: dict, paths: list[str]):
        for tool_id, jobs in pending.items():
            size = self.config.batch_size.get(tool_id, 8)
            for start in range(0, len(jobs), size):
                chunk = jobs[start : start + size]
                yield tool_id, chunk, [paths[i] for i, _ in chunk]

    def _compute_local(self, pending: dict, paths: list[str]):
        for tool_id, chunk, batch_paths in self._batches(pending, paths):
            sent = time.perf_counter()
            records = self.runner.run_batch(tool_id, batch_paths, self.config.timeout_s)
            self._timed(tool_id, sent)
            for (i, key), record in zip(chunk, records):
                yield i, tool_id, key, record

    def _compute_ray(self, pending: dict, paths: list[str]):
        """Every actor has one call in flight and the rest of its batches wait here, not in Ray's
        queue: when an actor dies, the one call it was running is re-run (``max_task_retries``) and
        nothing else. With all of an actor's calls queued in Ray, its death now and then also re-ran
        a call that had finished but whose answer had not reached the driver yet (Ray's retries are
        at least once): a tool saw a clip twice, and the kill test failed in CI."""
        ray = self._ensure_ray()
        from ray.exceptions import RayError

        waiting: dict[tuple[str, int], deque] = {}
        per_tool: dict[str, int] = {}
        for tool_id, chunk, batch_paths in self._batches(pending, paths):  # spread batches over replicas
            n = per_tool[tool_id] = per_tool.get(tool_id, -1) + 1
            waiting.setdefault(self._replica(tool_id, n), deque()).append((chunk, batch_paths))
        in_flight = {}

        def send(replica: tuple[str, int]) -> None:
            if waiting[replica]:
                chunk, batch_paths = waiting[replica].popleft()
                ref = self.actor(*replica).run_batch.remote(batch_paths)
                in_flight[ref] = (replica, chunk, batch_paths, time.perf_counter())

        for replica in waiting:
            send(replica)
        while in_flight:
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=self.config.timeout_s)
            if not done:  # nothing finished within the window: fail the oldest call, let Ray restart its actor
                ref = next(iter(in_flight))
                replica, chunk, batch_paths, sent = in_flight.pop(ref)
                tool_id = replica[0]
                self._timed(tool_id, sent)
                for (i, key), path in zip(chunk, batch_paths):
                    error = f"{path}: timed out after {self.config.timeout_s}s"
                    yield i, tool_id, key, make_record(tool_id, *key[2:], error=error)
                ray.cancel(ref)  # a call given up on is not re-run by Ray in the restarted actor
                ray.kill(self.actor(*replica), no_restart=False)
                send(replica)
                continue
            ref = done[0]
            replica, chunk, batch_paths, sent = in_flight.pop(ref)
            tool_id = replica[0]
            send(replica)
            try:
                records = ray.get(ref)
            except RayError as err:  # the actor died more often than max_task_retries allows
                records = [
                    make_record(tool_id, *key[2:], error=f"{path}: tool actor failed: {type(err).__name__}")
                    for (_, key), path in zip(chunk, batch_paths)
                ]
            self._timed(tool_id, sent)
            for (i, key), record in zip(chunk, records):
                yield i, tool_id, key, record


def _progress(total: int, enabled: bool):
    """A bar that stays readable in logs: live on a terminal, a line every 10 s otherwise."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        desc="tools",
        unit="call",
        disable=not enabled or total == 0,
        mininterval=0.1 if sys.stderr.isatty() else 10.0,
    )

"""The Ray tool pool and the on-disk cache, with injected faults: an actor SIGKILLed mid-precompute,
two processes filling one cache, a full disk, a hung call."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from tools.cache import ToolCache
from tools.pool import PoolConfig, ToolPool


def _cache_contents(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): json.loads(p.read_text()) for p in sorted(root.rglob("*.json"))}


@pytest.fixture(scope="module")
def clips(tmp_path_factory, click_wav, melody_wav, chord_wav, music_wav):
    """Eight distinct clips (copies with a few bytes appended change the content hash, not the audio)."""
    folder = tmp_path_factory.mktemp("clips")
    paths = []
    for k, src in enumerate([click_wav[0], melody_wav[0], chord_wav[0], music_wav] * 2):
        dst = folder / f"clip{k}.wav"
        dst.write_bytes(Path(src).read_bytes() + bytes(2 * k))
        paths.append(str(dst))
    return paths


@pytest.mark.slow  # Ray actors start in their own processes
def test_subset_runs_on_actors_and_second_run_is_cached(tmp_path, clips):
    """...on a Ray of the pool's own, even with another Ray left running on the machine (as a crashed
    run leaves one), which ``ray.init()`` would otherwise join and then refuse ``num_cpus``."""
    import ray
    from ray.cluster_utils import Cluster

    leftover = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    pool = ToolPool(PoolConfig(executor="ray", cache_dir=str(tmp_path / "c"), actor_cpus=0.25))
    try:
        first = pool.run_many(clips[:2], ["tempo", "pitch", "chords", "sound_events"])
        assert pool.computed == 8
        pids = {ray.get(pool.actor(t).pid.remote()) for t in ("tempo", "pitch", "chords", "sound_events")}
        assert len(pids) == 4  # one process per tool
        second = pool.run_many(clips[:2], ["tempo", "pitch", "chords", "sound_events"])
        assert pool.computed == 8 and second == first
        assert ray.get_runtime_context().gcs_address != leftover.address
    finally:
        pool.shutdown()
        leftover.shutdown()


@pytest.mark.slow  # 29 s: Ray actors (make test-all)
def test_an_actor_killed_on_its_third_call_is_restarted_and_the_records_match_an_undisturbed_run(tmp_path, clips):
    """A tool that SIGKILLs its own process on its third call: Ray restarts the actor (max_restarts) and
    re-runs the call (max_task_retries); the records came from two processes and equal those of a run
    in which nothing was killed."""
    extra = ["helpers.suicidal_tool:SPEC"]
    calm = ToolPool(
        PoolConfig(
            executor="local",
            cache_dir=str(tmp_path / "a"),
            enabled=["suicidal"],
            extra=extra,
            settings={"suicidal": {"counter": str(tmp_path / "calm.log"), "kill_at": 0}},
        )
    )
    undisturbed = [r["suicidal"]["output"] for r in calm.run_many(clips)]
    counter = tmp_path / "calls.log"
    pool = ToolPool(
        PoolConfig(
            executor="ray",
            cache_dir=str(tmp_path / "b"),
            enabled=["suicidal"],
            extra=extra,
            batch_size={"suicidal": 1},
            settings={"suicidal": {"counter": str(counter), "kill_at": 3}},
        )
    )
    try:
        results = pool.run_many(clips)
    finally:
        pool.shutdown()
    calls = [line.split() for line in counter.read_text().splitlines()]  # (pid, clip) per call
    pids = [pid for pid, _ in calls]
    killed = counter.with_suffix(".killed").read_text()
    assert killed == pids[2] and len(set(pids)) == 2
    ran = Counter(clip for _, clip in calls)  # the third call ran twice, every other clip once
    assert ran == {Path(c).name: 1 + (Path(c).name == calls[2][1]) for c in clips}, calls
    assert [r["suicidal"]["output"] for r in results] == undisturbed and pool.errors == {}


@pytest.mark.slow  # 16 s: two processes (make test-all)
def test_two_processes_filling_one_cache_leave_whole_single_records(tmp_path, clips):
    code = textwrap.dedent(f"""
        import json, sys
        from tools.pool import ToolPool, PoolConfig
        pool = ToolPool(PoolConfig(executor="local", cache_dir={str(tmp_path / "shared")!r}))
        pool.run_many({clips!r}, ["tempo", "pitch"])
        print(json.dumps(pool.computed))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    files = sorted((tmp_path / "shared").rglob("*"))
    records = [f for f in files if f.is_file()]
    assert not [f for f in records if f.name.startswith(".tmp-")]
    assert len(records) == 2 * len(clips)  # one file per (clip, tool), whoever wrote it
    assert all(json.loads(f.read_text())["tool"] in ("tempo", "pitch") for f in records)


@pytest.mark.slow  # 12 s: Ray actors (make test-all)
def test_a_full_disk_while_caching_is_a_clear_error_and_leaves_no_partial_entry(tmp_path, clips):
    code = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        from tools.pool import ToolPool, PoolConfig
        pool = ToolPool(PoolConfig(executor="local", cache_dir={str(tmp_path / "full")!r}))
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))  # no file may grow past 64 bytes: a full disk
        from autagent.cli import main
        sys.exit(main(["tools", "run", {clips[0]!r}, "--tools", "pitch", "--executor", "local",
                       "--set", "tools.cache_dir={tmp_path / "full"}"]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("autagent: error")]
    assert str(tmp_path / "full" / "pitch") in line and "cannot write the tool cache (File too large)" in line, line
    assert not [p for p in (tmp_path / "full").rglob("*") if p.is_file()]  # no torn or temporary entry


@pytest.mark.slow  # Ray actors start in their own processes
def test_a_hung_call_times_out_alone_and_is_not_run_again(tmp_path, clips):
    """A tool that never answers on one clip (it sleeps ten minutes there): after ``timeout_s`` without
    progress that call is an error record, counted, and its actor restarted; the clips before and after
    it on the same actor get their records, and the hung call is not re-run in the restarted actor
    (Ray's retries re-ran it there, and the clips queued behind it timed out in turn)."""
    counter = tmp_path / "calls.log"
    hung = Path(clips[1]).name
    pool = ToolPool(
        PoolConfig(
            executor="ray",
            cache_dir=str(tmp_path / "c"),
            timeout_s=12.0,  # the restarted actor's start and the next call fit well inside
            actor_cpus=0.25,
            batch_size={"hanging": 1},
            enabled=["hanging"],
            extra=["helpers.suicidal_tool:HANGING"],
            settings={"hanging": {"only": hung, "counter": str(counter)}},
        )
    )
    try:
        import ray

        ray.get(pool.actor("hanging").pid.remote())  # started: the first call's window is the call's own
        started = time.perf_counter()
        records = [r["hanging"] for r in pool.run_many(clips[:4], ["hanging"])]
        assert time.perf_counter() - started < 60
    finally:
        pool.shutdown()
    assert "timed out after 12.0s" in records[1]["error"] and pool.errors == {"hanging": 1}
    assert all("output" in r for k, r in enumerate(records) if k != 1), records
    assert counter.read_text().split() == [Path(c).name for c in clips[:4]]  # each clip once, in order


def test_cache_writes_are_atomic_and_keyed_by_version(tmp_path, monkeypatch):
    """A write that dies between writing its temporary file and renaming it leaves no entry and no
    temporary file, and the entry that was there before is still whole; a new version never reads an
    old output; a torn entry is a miss."""
    import os

    cache = ToolCache(tmp_path)
    record = {"tool": "tempo", "output": {"bpm": 120.0}, "backend": "b", "version": "v1"}
    cache.put("abc", "tempo", "b", "v1", record)
    assert cache.get("abc", "tempo", "b", "v1") == record
    assert cache.get("abc", "tempo", "b", "v2") is None  # a new version never reads an old output

    def dies(src, dst):  # the process is interrupted just before the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", dies)
    with pytest.raises(KeyboardInterrupt):
        cache.put("abc", "tempo", "b", "v1", {**record, "output": {"bpm": 60.0}})
    with pytest.raises(KeyboardInterrupt):
        cache.put("new", "tempo", "b", "v1", record)
    monkeypatch.undo()
    assert cache.get("abc", "tempo", "b", "v1") == record and cache.get("new", "tempo", "b", "v1") is None
    assert not list(tmp_path.rglob(".tmp-*"))
    cache.put("abc", "tempo", "b", "v1", {**record, "error": "x"})  # errors are not stored
    assert cache.get("abc", "tempo", "b", "v1") == record
    cache.path("abc", "tempo", "b", "v1").write_text("{torn")  # a torn entry is a miss, not a crash
    assert cache.get("abc", "tempo", "b", "v1") is None


def test_config_rejects_unknown_tools_and_bad_values():
    from tools.registry import ToolRegistryError

    with pytest.raises(ToolRegistryError, match="unregistered tools \\['whisper'\\]"):
        PoolConfig(enabled=["whisper"])
    with pytest.raises(ValueError, match="replicas.asr"):
        PoolConfig(replicas={"asr": 0})
    with pytest.raises(ValueError, match="not in tools.enabled"):
        PoolConfig(settings={"speakers": {}})


def test_the_pool_fills_librosas_kernel_cache_before_it_starts_any_actor(monkeypatch, tmp_path):
    """numba issue #10128: actors compiling one guvectorized kernel together corrupt its cache (every
    later call segfaults). The pool compiles the kernels itself, before Ray, and asks only actors on
    another node (an address given) to warm their own node's cache."""
    import ray

    import tools.pool as pool_module

    order = []
    monkeypatch.setattr(pool_module, "warm_librosa", lambda: order.append("warm"))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: order.append("ray.init"))
    ToolPool(PoolConfig(enabled=["tempo"], cache_dir=str(tmp_path)))._ensure_ray()
    assert order == ["warm", "ray.init"]

    created = []

    class FakeActor:
        def options(self, **kwargs):
            return self

        def remote(self, *args):
            created.append(args[-1])

    monkeypatch.setattr(pool_module, "_actor_class", FakeActor)
    monkeypatch.setattr(ToolPool, "_ensure_ray", lambda self: None)
    ToolPool(PoolConfig(enabled=["tempo"], cache_dir=str(tmp_path))).actor("tempo")
    ToolPool(PoolConfig(enabled=["tempo"], cache_dir=str(tmp_path), ray_address="auto")).actor("tempo")
    assert created == [False, True]


@pytest.mark.slow  # compiles librosa's kernels from nothing, three processes at once (about 40 s)
def test_processes_warming_one_empty_kernel_cache_together_leave_it_usable(tmp_path):
    """Three processes fill one empty numba cache at once, then a fourth runs the tools' librosa calls
    from it: without the lock the first three compile the same kernels together."""
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "OMP_NUM_THREADS": "1"}
    warm = "from tools.numba_cache import warm_librosa; warm_librosa()"
    procs = [subprocess.Popen([sys.executable, "-c", warm], env=env) for _ in range(3)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    assert list((tmp_path / "numba").rglob("*.nbi")), "nothing was cached"
    use = textwrap.dedent(
        """
        import numpy as np, librosa
        from tools.numba_cache import _clip
        for dtype in (np.float32, np.float64):
            y = _clip(22050, dtype)
            assert len(librosa.onset.onset_detect(y=y, sr=22050)) >= 3
            assert 100 < float(np.atleast_1d(librosa.beat.beat_track(y=y, sr=22050)[0])[0]) < 140
        """
    )
    assert subprocess.run([sys.executable, "-c", use], env=env, timeout=300).returncode == 0

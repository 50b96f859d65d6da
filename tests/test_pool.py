"""The Ray tool pool and the on-disk cache: parallel subsets, cache hits across pools, restart of a
dead actor, per-call timeouts."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.cache import ToolCache
from tools.pool import PoolConfig, ToolPool


@pytest.fixture(scope="module")
def ray_pool(tmp_path_factory):
    pool = ToolPool(PoolConfig(executor="ray", cache_dir=str(tmp_path_factory.mktemp("raycache")), actor_cpus=0.25))
    yield pool
    pool.shutdown()


def test_subset_runs_on_actors_and_second_run_is_cached(ray_pool, click_wav, melody_wav):
    import ray

    paths = [str(click_wav[0]), str(melody_wav[0])]
    first = ray_pool.run_many(paths, ["tempo", "pitch", "chords", "sound_events"])
    assert ray_pool.computed == 8
    pids = {ray.get(ray_pool.actor(t).pid.remote()) for t in ("tempo", "pitch", "chords", "sound_events")}
    assert len(pids) == 4  # one process per tool
    second = ray_pool.run_many(paths, ["tempo", "pitch", "chords", "sound_events"])
    assert ray_pool.computed == 8 and second == first


def test_dead_actor_is_restarted_and_call_retried(ray_pool, tmp_path, click_wav):
    import shutil

    import ray

    clip = tmp_path / "fresh.wav"  # a new file name with new content: not in the cache
    shutil.copy(click_wav[0], clip)
    with open(clip, "ab") as handle:
        handle.write(b"\x00\x00")  # change the bytes (content hash) without changing the audio
    ray_pool.run(str(click_wav[0]), ["tempo"])
    ray.kill(ray_pool.actor("tempo"), no_restart=True)
    restarts = ray_pool.restarts
    record = ray_pool.run(str(clip), ["tempo"])["tempo"]
    assert "error" not in record and abs(record["output"]["bpm"] - 120) < 3
    assert ray_pool.restarts == restarts + 1


def test_timeout_gives_error_record(tmp_path, click_wav):
    pool = ToolPool(PoolConfig(executor="ray", cache_dir=str(tmp_path / "c"), timeout_s=0.05, actor_cpus=0.25))
    try:
        record = pool.run(str(click_wav[0]), ["chords"])["chords"]  # loading madmom alone takes longer
        assert "timed out" in record["error"]
    finally:
        pool.shutdown()


def test_cache_is_shared_across_processes(tmp_path, click_wav):
    cache_dir = tmp_path / "shared"
    code = ("import json,sys; from tools.pool import ToolPool, PoolConfig; "
            f"p=ToolPool(PoolConfig(executor='local', cache_dir={str(cache_dir)!r})); "
            f"p.run({str(click_wav[0])!r}, ['tempo']); print(json.dumps([p.computed, p.cache.hits]))")
    counts = [json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
              for _ in range(2)]
    assert counts == [[1, 0], [0, 1]]


def test_cache_writes_are_atomic_and_keyed_by_version(tmp_path):
    cache = ToolCache(tmp_path)
    record = {"tool": "tempo", "output": {"bpm": 120.0}, "backend": "b", "version": "v1"}
    cache.put("abc", "tempo", "b", "v1", record)
    assert cache.get("abc", "tempo", "b", "v1") == record
    assert cache.get("abc", "tempo", "b", "v2") is None  # a new version never reads an old output
    assert not list(tmp_path.rglob(".tmp-*"))
    cache.put("abc", "tempo", "b", "v1", {**record, "error": "x"})  # errors are not stored
    assert cache.get("abc", "tempo", "b", "v1") == record
    cache.path("abc", "tempo", "b", "v1").write_text("{torn")  # a torn entry is a miss, not a crash
    assert cache.get("abc", "tempo", "b", "v1") is None


def test_config_rejects_unknown_tools():
    with pytest.raises(KeyError, match="unknown tool 'whisper'"):
        PoolConfig(settings={"whisper": {}})
    with pytest.raises(ValueError, match="replicas.asr"):
        PoolConfig(replicas={"asr": 0})

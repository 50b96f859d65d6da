"""The phase table's parts: phases in the order they ran, a stand-in that times some methods, each
router's steps from its log, each tool's calls in the pool."""

from __future__ import annotations

import json
import time

from autagent.evaluation.phases import Clock, Phases, table
from autagent.policies.router.plots import member_step_seconds
from tools.pool import PoolConfig, ToolPool


def test_phases_add_up_in_the_order_they_ran():
    phases = Phases()
    with phases("b"):
        time.sleep(0.01)
    with phases("a"):
        pass
    phases.add("b", 1.0)
    assert list(phases.seconds) == ["b", "a"] and phases.seconds["b"] >= 1.01 and phases.total() >= 0.01


def test_a_clock_times_the_named_methods_and_stands_in_for_the_rest():
    class Slow:
        name = "slow"

        def work(self, x):
            time.sleep(0.02)
            return x + 1

        def other(self):
            time.sleep(0.02)
            return self.work(0)  # inside: not seen by the clock

    clock = Clock(Slow(), ("work",))
    assert clock.work(1) == 2 and clock.name == "slow" and 0.02 <= clock.seconds < 0.04
    assert clock.other() == 1 and clock.seconds < 0.04


def test_each_routers_steps_come_from_its_log(tmp_path):
    (tmp_path / "members" / "1").mkdir(parents=True)
    (tmp_path / "train_log.jsonl").write_text("\n".join(json.dumps({"step_seconds": s}) for s in (1.0, 2.0)))
    (tmp_path / "members/1/train_log.jsonl").write_text(json.dumps({"step_seconds": 0.5}) + "\n")
    assert member_step_seconds(tmp_path, 2) == [3.0, 0.5]
    assert member_step_seconds(tmp_path, 3) == []  # a member without a log: nothing rather than a wrong row
    timings = {"phases": {"tool records": 9.0, "training": 4.0, "total": 20.0}, "routers": [3.0, 0.5]}
    timings["tools"] = {"tempo": {"busy_s": 5.0, "last_s": 8.5}}
    text = "\n".join(table(timings))
    assert "| tool records | 9.0 | | |" in text  # wall time
    assert "| · tempo's calls | | 5.0 | 8.5 |" in text  # worker time apart, and when its last record came
    assert "| · router 1: GRPO steps | 0.5 | | |" in text and "| **total** | 20.0 | | |" in text
    assert "| wall (s) | worker (s) |" in text and "add up to more than the phase's wall time" in text


def test_the_pool_times_each_tools_calls_and_not_its_cached_records(tmp_path, click_wav, melody_wav):
    clips = [str(click_wav[0]), str(melody_wav[0])]
    pool = ToolPool(PoolConfig(executor="local", cache_dir=str(tmp_path / "c"), enabled=["tempo", "pitch"]))
    started = time.perf_counter()
    pool.run_many(clips)
    wall = time.perf_counter() - started
    assert set(pool.seconds) == {"tempo", "pitch"} and 0 < sum(pool.seconds.values()) <= wall
    assert all(0 < pool.done_at[t] <= wall for t in pool.seconds)
    before = dict(pool.seconds)
    pool.run_many(clips)  # served from the cache: no call, no seconds
    assert pool.seconds == before

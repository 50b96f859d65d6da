"""The in-process answer cache's file is bounded (issue 62, low): it once grew without end and was read
whole at start.  Past ``max_file_bytes`` it is compacted to the most recent answers, and it is read line
by line, an over-long line skipped unread.  Every test here fails on 0169c2d."""

from __future__ import annotations

import json
import tracemalloc

from autagent.data.sample import Sample
from autagent.reasoners.base import CachedReasoner, Reply


class Echo:
    """A reasoner that answers with the question (no clip read)."""

    name = "echo"

    def fingerprint(self) -> str:
        return "echo-test"

    def answer_many(self, requests):
        return [Reply(sample.question.upper()) for sample, _ in requests]


def _asked(first: int, last: int):
    return [(Sample(f"q{i}", "", f"question number {i}", ("a", "b"), "a"), None) for i in range(first, last)]


def test_the_file_stays_under_its_bound_and_keeps_the_most_recent_answers(tmp_path):
    cache = CachedReasoner(Echo(), tmp_path, max_file_bytes=20_000)
    for start in range(0, 2000, 100):
        cache.ask(_asked(start, start + 100))
        assert cache.path.stat().st_size <= 20_000
    cache.close()
    reopened = CachedReasoner(Echo(), tmp_path, max_file_bytes=20_000)
    recent, old = _asked(1990, 2000), _asked(0, 10)
    assert all(reopened.is_cached(s, r) for s, r in recent) and not any(reopened.is_cached(s, r) for s, r in old)
    assert [r.text for r in reopened.ask(recent)] == [f"QUESTION NUMBER {i}" for i in range(1990, 2000)]
    assert reopened.calls == 0  # served from the compacted file
    rows = [json.loads(line) for line in reopened.path.read_text().splitlines()]
    assert len({row["key"] for row in rows}) == len(rows) > 50


def test_a_file_over_its_bound_is_compacted_at_start_and_read_line_by_line(tmp_path):
    first = CachedReasoner(Echo(), tmp_path)
    first.ask(_asked(0, 20))
    first.close()
    (path,) = tmp_path.glob("*.jsonl")
    with open(path, "a") as out:  # a torn 40 MB line, as a full disk or a foreign writer leaves
        out.write('{"key": "x", "answer": "' + "y" * (40 << 20))
    tracemalloc.start()
    try:
        read = CachedReasoner(Echo(), tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak  # never the whole file in memory
    assert all(read.is_cached(s, r) for s, r in _asked(0, 20))
    read.close()
    compacted = CachedReasoner(Echo(), tmp_path, max_file_bytes=1 << 20)
    assert path.stat().st_size < 1 << 20 and all(compacted.is_cached(s, r) for s, r in _asked(0, 20))

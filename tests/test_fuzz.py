"""The fuzz corpus (tests/helpers/fuzz_corpus.py): a fast subset with the command line called in process, and
the whole (one-hour clip, every tool, every command-line path in a process of its own) as a slow
test; both run in CI (``.ci/run``: the subset in ``make test``, the whole on a line of its own).
Every bad input ends in a clear error or is handled as data; no crash; no row lost."""

from __future__ import annotations

import pytest
from helpers.fuzz_corpus import run


def _check(summary, minimum):
    assert summary["all"]["inputs"] >= minimum
    crashes = {k: v["first_crashes"] for k, v in summary.items() if k != "all" and v["crashes"]}
    assert summary["all"]["crashes"] == 0, crashes
    assert summary["all"]["rows_lost"] == 0, {k: v["rows_lost"] for k, v in summary.items()}


def test_fuzz_corpus_fast_subset(tmp_path):
    _check(run(fast=True, keep=str(tmp_path), in_process=True), 200)


@pytest.mark.slow
def test_fuzz_corpus_whole(tmp_path):
    _check(run(fast=False, keep=str(tmp_path)), 400)

"""Guards of the answer table's filling and reading (``make mutate-guards`` mutates table.py under them): once
the budget is spent only what the cache holds whole is read, the rewards follow the table's state, the
surrogate's fidelity predicts each asked subset without it, and the defaults the recorded runs used."""

from __future__ import annotations

import pytest

from autagent.policies.router.crossval import CrossValConfig
from autagent.policies.router.table import AnswerTable, Budget, TableConfig, query_order
from autagent.reasoners.base import CachedReasoner, Reply
from tests.test_guards_router import TOOLS, _samples


class Scoring:
    """Right (``a``) with a tool, wrong (``b``) without; choice scores to match."""

    name = "scoring"

    def fingerprint(self) -> str:
        return "scoring-1"

    def answer_many(self, requests):
        return [
            Reply("a", scores=(1.0, 0.0, 0.0)) if records else Reply("b", scores=(0.0, 1.0, 0.0))
            for _, records in requests
        ]


class Watched(CachedReasoner):
    """The cached reasoner, keeping every batch it is sent (its ``max_new`` with it)."""

    def __init__(self):
        super().__init__(Scoring(), None)
        self.sent = []

    def ask(self, requests, max_new=None):
        self.sent.append(([s.id for s, _ in requests], max_new))
        return super().ask(requests, max_new)


def test_at_the_cap_only_queries_the_cache_holds_whole_are_read_and_nothing_else_is_sent():
    """Budget 5 (one query's design), two queries a call.  Order: [0] [1] asked (the cap falls after [0]);
    then [2] cached whole, [3] not: [2] is read free and trains, [3] is left out and never sent; then [4]
    cached in part (no tool and ``asr``), [5] not: both left out, nothing sent, nothing of [4] read (its
    cached single would count in the surrogate's fidelity)."""
    samples = _samples(6)
    records = {s.id: {t: {"tool": t} for t in TOOLS} for s in samples}
    order = query_order([s.id for s in samples], 0)
    reasoner = Watched()
    warm = AnswerTable(samples, TOOLS)
    reasoner.ask([(warm.samples[order[2]], warm._shown(records, order[2], z)) for z in warm.design])
    reasoner.ask([(warm.samples[order[4]], warm._shown(records, order[4], z)) for z in [(), ("asr",)]])
    reasoner.sent.clear()
    table = AnswerTable(samples, TOOLS).fill(reasoner, records, Budget(5), items_per_call=2)
    assert table.items == sorted([order[0], order[2]])
    assert sorted(table.incomplete) == sorted([order[1], order[3], order[4], order[5]])
    assert reasoner.calls == 7 + 5  # the warm-up's seven, then the five the budget allows
    assert reasoner.sent == [([order[0]] * 5 + [order[1]] * 5, 5), ([order[2]] * 5, 0)]
    assert table.answers[order[4]] == {} and table.surrogate_fidelity()["single"]["n"] == 2 * 3


def test_the_rewards_follow_the_table_through_a_fill():
    """Read before the table is filled (nothing known: every subset wrong), then after: the fill's
    answers count (the memo is keyed to the table's state)."""
    samples = _samples(2)
    records = {s.id: {t: {"tool": t} for t in TOOLS} for s in samples}
    table = AnswerTable(samples, TOOLS)
    assert table.rewards(["q00", "q01"], "binary", 0.0).sum() == 0.0
    table.fill(CachedReasoner(Scoring(), None), records, Budget(None))
    assert table.rewards(["q00", "q01"], "binary", 0.0).tolist() == [[0.0] + [1.0] * 7] * 2
    assert table.rewards([], "binary", 0.1).shape == (0, 8)


def test_the_surrogates_fidelity_predicts_each_asked_subset_without_it():
    """No scores: the nearest other asked subset answers.  ``asr`` alone (right) is predicted from no tool
    (wrong): a miss; the other singles and all tools and (asr, emotion) are hits: singles 2 of 3."""
    samples = _samples(1)
    table = AnswerTable(samples, TOOLS)
    for z, text in [((), "b"), (("asr",), "a"), (("emotion",), "b"), (("chords",), "b"), (TOOLS, "a")]:
        table.add("q00", z, text)
    table.add("q00", ("asr", "emotion"), "a")
    assert table.surrogate_fidelity() == {
        "all": {"agree": 1.0, "n": 1},
        "other": {"agree": 1.0, "n": 1},
        "single": {"agree": 0.6667, "n": 3},
    }
    assert table.surrogate("q00", ("asr",)) == "a" and table.surrogate("q00", ("asr",), exclude=("asr",)) == "b"


def test_answers_without_scores_are_never_added_as_effects():
    """No tool and every single asked without scores: a pair is the nearest asked subset's answer (the
    additive surrogate needs scores for every term)."""
    samples = _samples(1)
    table = AnswerTable(samples, TOOLS)
    for z, text in [((), "b"), (("asr",), "c"), (("emotion",), "c"), (("chords",), "b")]:
        table.add("q00", z, text)
    assert table.answer("q00", ("asr", "emotion")) == "c" and table.answer("q00", TOOLS) == "c"


def test_a_budget_file_in_a_new_folder_and_one_without_spent(tmp_path):
    budget = Budget(5, tmp_path / "run" / "deep" / "budget.json")
    budget.charge(2)
    assert Budget(5, tmp_path / "run" / "deep" / "budget.json").left == 3
    (tmp_path / "empty.json").write_text('{"limit": 5}')
    assert Budget(5, tmp_path / "empty.json").left == 5


def test_the_defaults_that_decide_which_queries_a_recorded_run_used():
    """The configs in configs/ and adapt's defaults leave these unset: the table's query order (which
    queries a budget buys, and which answers a shared cache already holds), its queries per call, and how
    cross-validation deals its folds are these defaults; a changed one silently changes every run's
    data against its record."""
    assert TableConfig().order_seed == 0 and TableConfig().items_per_call == 4
    assert CrossValConfig(folds=2).seed == 0 and CrossValConfig().folds == 0 and CrossValConfig().one_se is False


def test_the_confidence_reads_usable_scores_and_falls_back_to_the_answer_otherwise():
    """p(right) is the softmax of the choice scores, shifted by their maximum (log-probabilities near -800
    would underflow to 0/0 unshifted); −inf on a choice is a usable score, a NaN or no scores at all fall
    back to 1[the answer is right]; a subset never asked takes the surrogate's additive scores."""
    import math

    samples = _samples(2)
    table = AnswerTable(samples, TOOLS)
    rows = [((), "b", (-801.0, -800.0, -900.0)), (("asr",), "a", None), (("emotion",), "a", (0.0, math.nan, 0.0))]
    for z, text, scores in [*rows, (("chords",), "b", (0.0, 0.0, -math.inf))]:
        table.add("q00", z, text, scores)
    for z, text, scores in [
        ((), "b", (0.0, 1.0, 0.0)),
        (("asr",), "a", (1.0, 0.0, 0.0)),
        (("emotion",), "b", (0.0, 1.0, 1.0)),
    ]:
        table.add("q01", z, text, scores)
    got = table.confidence_matrix(["q00"], [(), ("asr",), ("emotion",), ("chords",)])
    assert got[0].tolist() == pytest.approx([1 / (1 + math.e), 1.0, 1.0, 0.5])
    assert table.confidence_matrix(["q01"], [("asr", "emotion")])[0, 0] == pytest.approx(math.e / (2 * math.e + 1))

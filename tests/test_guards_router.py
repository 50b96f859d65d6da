"""Guards of the claims made on an answer table (``make mutate-guards`` mutates the modules under them):
cross-validation judges a candidate on queries it did not train on, the budget caps what is asked, the
exact objective is the expected reward (its KL and its renormalisation over asked subsets included), and
the table's rewards are what its docstring says."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from autagent.data.sample import Sample
from autagent.policies.router.crossval import CrossValConfig, apply, candidates, cross_validate, held_out_figures
from autagent.policies.router.exact import expected_loss, subset_matrix
from autagent.policies.router.table import AnswerTable, Budget, TableConfig, ask_within, query_order
from autagent.reasoners.base import Reply

TOOLS = ("asr", "emotion", "chords")


def _samples(n: int) -> list[Sample]:
    return [
        Sample(f"q{i:02d}", "", f"question {i}", ("a", "b", "c"), "a", "speech", "", {"tools": [TOOLS[i % 3]]})
        for i in range(n)
    ]


def _table(samples, needed_only=True) -> AnswerTable:
    """Every subset asked: right (``a``) exactly when the subset is the query's needed tool alone."""
    table = AnswerTable(samples, TOOLS, ["empty", "singles", "all"])
    for s in samples:
        for bits in subset_matrix(len(TOOLS)).tolist():
            z = tuple(t for t, on in zip(TOOLS, bits) if on)
            table.add(s.id, z, "a" if z == tuple(s.meta["tools"]) else "b")
    return table


class Memorising:
    """Selects each trained query's needed tool; all three tools (wrong) on any query it never saw."""

    def __init__(self, trained: set[int], samples):
        self.trained, self.samples = trained, samples

    def select(self, features):
        rows = []
        for i in features[:, 0].long().tolist():
            needed = TOOLS.index(self.samples[i].meta["tools"][0])
            rows.append([float(k == needed) for k in range(3)] if i in self.trained else [1.0, 1.0, 1.0])
        return torch.tensor(rows)


def test_cross_validation_judges_each_candidate_on_the_fold_it_did_not_train_on():
    """A selector that only knows its training queries scores 0 held out: scoring the training folds
    (crossval.py's ``features[held]`` -> the kept ones) would give it 1."""
    samples = _samples(12)
    features = torch.arange(12, dtype=torch.float32)[:, None]
    seen = []

    def train(kept, candidate):
        seen.append(sorted(kept.tolist()))
        return Memorising(set(kept.tolist()), samples)

    config = CrossValConfig(folds=4, grid={"reward.tool_cost": [0.0]}, seed=3)
    found = cross_validate(config, samples, features, _table(samples), train, TOOLS, price=0.0)
    (row,) = found["candidates"]
    assert row["accuracy"] == 0.0 and row["avg_tools"] == 3.0 and row["reward"] == 0.0
    assert [len(k) for k in seen] == [9, 9, 9, 9] and found["folds"] == 4 and found["queries"] == 12
    held = [sorted(set(range(12)) - set(k)) for k in seen]
    assert sorted(i for fold in held for i in fold) == list(range(12))  # each query held out exactly once
    assert len(row["folds"]) == 4 and all(f["accuracy"] == 0.0 for f in row["folds"])
    knows_all = held_out_figures(Memorising(set(range(12)), samples), features, samples, _table(samples), TOOLS, 0.1)
    assert knows_all == {"accuracy": 1.0, "avg_tools": 1.0, "reward": pytest.approx(1.0 - 0.1), "asked": 1.0}


def test_cross_validation_reports_the_mean_and_standard_error_over_folds_and_the_best():
    samples = _samples(12)
    features = torch.arange(12, dtype=torch.float32)[:, None]
    per_fold = iter([0.0, 1.0, 1.0, 1.0])  # a candidate right on three folds of four

    def train(kept, candidate):
        knows = set(range(12)) if (candidate["grpo.beta"] == 0.0 and next(per_fold)) else set()
        return Memorising(knows, samples)

    config = CrossValConfig(folds=4, grid={"grpo.beta": [0.0, 0.04]})
    found = cross_validate(config, samples, features, _table(samples), train, TOOLS, price=0.0)
    rows = {r["candidate"]["grpo.beta"]: r for r in found["candidates"]}
    assert rows[0.0]["reward"] == pytest.approx(0.75) and rows[0.04]["reward"] == 0.0
    assert rows[0.0]["reward_se"] == pytest.approx(np.std([0, 1, 1, 1], ddof=1) / 2)
    assert rows[0.0]["accuracy"] == pytest.approx(0.75) and rows[0.0]["avg_tools"] == pytest.approx(1.5)
    assert found["best"] == found["chosen"] == {"grpo.beta": 0.0} and found["rule"] == "best mean"
    assert candidates({"b": [1, 2], "a": [3]}) == [{"a": 3, "b": 1}, {"a": 3, "b": 2}] and candidates({}) == [{}]


class Counting:
    """A progress bar that counts its steps."""

    n = 0

    def update(self, k):
        self.n += k


def test_held_out_reward_subtracts_no_tool_accuracy_and_the_standard_error_divides_by_root_folds():
    """Queries right with no tool (every other one): the held-out reward is accuracy − no-tool accuracy −
    price × tools (a no-tool accuracy added instead would read 1.4); over three folds the standard error is
    stdev / √3 (÷ 1.5, what ``folds * 0.5`` gives, equals √4 only at four folds); the bar moves once per
    candidate and fold."""
    import statistics

    samples = _samples(6)
    features = torch.arange(6, dtype=torch.float32)[:, None]
    table = _table(samples)
    for s in samples[::2]:
        table.add(s.id, (), "a")
    figures = held_out_figures(Memorising(set(range(6)), samples), features, samples, table, TOOLS, 0.1)
    assert figures["accuracy"] == 1.0 and figures["reward"] == pytest.approx(1.0 - 0.5 - 0.1)
    knows = iter([set(range(6)), set(), set(range(6)), set(range(6)), set(range(6)), set(range(6))])
    bar = Counting()
    config = CrossValConfig(folds=3, grid={"grpo.beta": [0.0, 0.04]})
    found = cross_validate(
        config, samples, features, table, lambda kept, c: Memorising(next(knows), samples), TOOLS, 0.1, bar
    )
    row = found["candidates"][0]
    rewards = [f["reward"] for f in row["folds"]]
    assert len(rewards) == 3 and statistics.stdev(rewards) > 0
    assert row["reward_se"] == pytest.approx(statistics.stdev(rewards) / 3**0.5)
    assert bar.n == 2 * 3


def test_the_one_standard_error_rule_takes_the_fewest_tools_within_one_se_of_the_best_then_the_higher_reward():
    """Four folds, price 0.1, right whenever the needed tool is among those called.  Per fold: A calls all
    three tools on three folds and none on the last (mean 0.525, se 0.175: the bar is 0.35); B the needed
    tool on two folds (0.45, 0.5 tools); C the same tools as B, one query a fold wrong on its second fold
    (0.367, 0.5 tools); D below the bar.  One SE takes B (fewest tools, then the higher mean); the best
    mean is A."""
    samples = _samples(12)
    features = torch.arange(12, dtype=torch.float32)[:, None]
    table = AnswerTable(samples, TOOLS, ["empty", "singles", "all"])
    for s in samples:
        for bits in subset_matrix(len(TOOLS)).tolist():
            z = tuple(t for t, on in zip(TOOLS, bits) if on)
            table.add(s.id, z, "a" if s.meta["tools"][0] in z else "b")

    class Calls:
        def __init__(self, kind, held):
            self.kind, self.held = kind, held

        def select(self, feats):
            rows = []
            for i in feats[:, 0].long().tolist():
                needed = TOOLS.index(samples[i].meta["tools"][0])
                wrong = self.kind == "needed, one wrong" and i == min(self.held)
                pick = {"all": [1.0] * 3, "none": [0.0] * 3}.get(self.kind, [float(k == needed) for k in range(3)])
                rows.append([float(k == (needed + 1) % 3) for k in range(3)] if wrong else pick)
            return torch.tensor(rows)

    plans = {
        0.0: iter(["all", "all", "all", "none"]),
        0.01: iter(["needed", "needed", "none", "none"]),
        0.02: iter(["needed", "needed, one wrong", "none", "none"]),
        0.03: iter(["needed", "none", "none", "none"]),
    }

    def train(kept, candidate):
        return Calls(next(plans[candidate["grpo.beta"]]), sorted(set(range(12)) - set(kept.tolist())))

    config = CrossValConfig(folds=4, grid={"grpo.beta": list(plans)}, one_se=True)
    found = cross_validate(config, samples, features, table, train, TOOLS, price=0.1)
    rows = {r["candidate"]["grpo.beta"]: r for r in found["candidates"]}
    assert rows[0.0]["reward"] == pytest.approx(0.525) and rows[0.0]["reward_se"] == pytest.approx(0.175)
    assert rows[0.01]["reward"] == pytest.approx(0.45) and rows[0.02]["reward"] == pytest.approx(
        0.9 / 4 + (2 / 3 - 0.1) / 4
    )
    assert rows[0.01]["avg_tools"] == rows[0.02]["avg_tools"] == 0.5 and rows[0.03]["reward"] < 0.35
    assert found["best"] == {"grpo.beta": 0.0} and found["chosen"] == {"grpo.beta": 0.01}
    assert found["rule"] == "one standard error, fewest tools"


def test_cross_validation_of_a_single_training_query_is_refused_in_one_clear_line():
    """A budget that completes one query leaves one fold: nothing to train on when it is held out."""
    samples = _samples(1)
    config = CrossValConfig(folds=2, grid={"grpo.beta": [0.0]})
    with pytest.raises(ValueError, match="training quer") as refused:
        cross_validate(config, samples, torch.zeros(1, 1), _table(samples), lambda k, c: None, TOOLS, 0.0)
    from autagent.cli import _user_error

    assert _user_error(refused.value)  # the CLI says it in one line (exit 2), no traceback


def test_a_crossval_candidate_overrides_only_what_it_names_and_bad_configs_are_refused():
    from autagent.policies.router.config import RouterGRPOConfig

    grpo, price = apply(RouterGRPOConfig(beta=0.04, steps=10), 0.05, {"grpo.beta": 0.0})
    assert (grpo.beta, grpo.steps, grpo.credit, price) == (0.0, 10, "subset", 0.05)
    grpo, _ = apply(RouterGRPOConfig(), 0.05, {"policy.router.credit": "tool", "policy.router.learning_rate": 0.1})
    assert (grpo.credit, grpo.learning_rate, grpo.beta) == ("tool", 0.1, 0.04)
    assert apply(RouterGRPOConfig(), 0.05, {"reward.tool_cost": 0.0})[1] == 0.0
    with pytest.raises(ValueError, match="grpo.learning_rate moved to policy.router.learning_rate"):
        CrossValConfig(folds=2, grid={"grpo.learning_rate": [0.1]})
    for bad in ({"folds": 1}, {"folds": -2}, {"folds": 2, "grid": {"policy.hidden": [1]}}, {"grid": {"grpo.beta": []}}):
        with pytest.raises(ValueError):
            CrossValConfig(**bad)
    CrossValConfig(folds=2, grid={"grpo.beta": [0.0]})  # the smallest allowed


def test_the_budget_caps_what_is_asked_and_counts_down_to_zero(tmp_path):
    budget = Budget(5, tmp_path / "b.json")
    assert (budget.left, budget.exhausted) == (5, False)
    budget.charge(4)
    assert (budget.left, budget.exhausted) == (1, False)
    budget.charge(3)  # what was asked counts, even past the cap
    assert (budget.left, budget.exhausted, budget.spent) == (0, True, 7)
    assert Budget(9, tmp_path / "b.json").left == 2  # a resumed run counts on
    unlimited = Budget(None)
    unlimited.charge(100)
    assert (unlimited.left, unlimited.exhausted) == (None, False)

    class Counting:
        calls = 0

        def ask(self, requests, max_new=None):
            self.max_new = max_new
            asked = len(requests) if max_new is None else min(max_new, len(requests))
            self.calls += asked
            return [Reply("a") if k < asked else None for k in range(len(requests))]

        def check_health(self):
            pass

    reasoner, budget = Counting(), Budget(3)
    replies = ask_within(reasoner, [None] * 5, budget)
    assert reasoner.max_new == 3 and sum(r is not None for r in replies) == 3 and budget.spent == 3


def test_a_table_with_a_budget_stops_asking_and_keeps_whole_queries_only():
    samples = _samples(6)

    class Asked:
        calls = 0

        def ask(self, requests, max_new=None):
            n = len(requests) if max_new is None else min(max_new, len(requests))
            self.calls += n
            return [Reply("a", scores=(1.0, 0.0, 0.0)) if k < n else None for k in range(len(requests))]

        def check_health(self):
            pass

        def is_cached(self, sample, records):
            return False

    records = {s.id: {t: {"tool": t} for t in TOOLS} for s in samples}
    reasoner = Asked()
    table = AnswerTable(samples, TOOLS).fill(reasoner, records, Budget(12), items_per_call=1)
    assert reasoner.calls == 12 and len(table.items) == 2 and len(table.incomplete) == 4  # 5 answers a query
    reasoner = Asked()
    used = AnswerTable(samples, TOOLS).fill(reasoner, records, Budget(12), items_per_call=1, counts="used")
    assert reasoner.calls == 10 and len(used.items) == 2 and len(used.incomplete) == 4  # 12 // 5 whole queries
    assert query_order([s.id for s in samples], 0) == query_order([s.id for s in reversed(samples)], 0)
    assert query_order([s.id for s in samples], 0) != query_order([s.id for s in samples], 1)
    for bad in ({"design": ["singles"]}, {"budget": 0}, {"outside": "x"}, {"unasked": "x"}, {"items_per_call": 0}):
        with pytest.raises(ValueError):
            TableConfig(**bad)
    TableConfig(budget=1, items_per_call=1)


def test_the_tables_rewards_are_right_minus_no_tool_minus_the_price():
    samples = _samples(3)
    table = _table(samples)
    binary = table.rewards([s.id for s in samples], "binary", 0.1)
    differential = table.rewards([s.id for s in samples], "differential", 0.1)
    sizes = subset_matrix(3).sum(-1).numpy()
    right = (binary + 0.1 * sizes).round(6)
    assert right.sum(-1).tolist() == [1.0, 1.0, 1.0] and right[:, 0].tolist() == [0.0, 0.0, 0.0]
    table.add(samples[0].id, (), "a")  # now right with no tool: the differential reward subtracts it
    after = table.rewards([samples[0].id], "differential", 0.0)[0]
    assert (
        after[0] == 0.0
        and after.min() == -1.0
        and np.allclose(differential[1:], table.rewards(["q01", "q02"], "differential", 0.1))
    )
    assert table.asked_mask(["q00"]).tolist() == [[1.0] * 8]


def test_the_surrogate_falls_back_to_the_nearest_asked_subset_without_scores():
    samples = _samples(1)
    table = AnswerTable(samples, TOOLS)
    assert table.answer("q00", ("asr",)) is None  # nothing asked: nothing to predict from
    table.add("q00", (), "b")
    table.add("q00", ("asr", "emotion"), "c")
    assert table.answer("q00", ("asr",)) == "b"  # one away from both: the smaller
    assert table.answer("q00", ("asr", "emotion", "chords")) == "c"
    assert not table.asked("q00", ("asr",)) and table.asked("q00", ())
    scored = AnswerTable(samples, TOOLS)
    scored.add("q00", (), "a", (1.0, 0.0, 0.0))
    for t, effect in zip(TOOLS, [(0.0, 0.6, 0.0), (0.0, 0.6, 0.0), (0.0, 0.0, 0.5)]):
        scored.add("q00", (t,), "x", tuple(np.add((1.0, 0.0, 0.0), effect)))
    assert scored.answer("q00", ("asr", "emotion")) == "b"  # 1.0 against 1.2: the effects add
    assert scored.answer("q00", ("asr", "chords")) == "a"  # 1.0 against 0.6 and 0.5


def test_the_exact_objective_weighs_the_kl_and_renormalises_over_asked_subsets():
    torch.manual_seed(0)
    logits, reference = torch.randn(2, 3), torch.randn(2, 3)
    rewards, subsets = torch.randn(2, 8), subset_matrix(3)
    p, q = torch.sigmoid(logits), torch.sigmoid(reference)
    kl = (p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()).sum(-1)
    pi = torch.stack([torch.prod(torch.where(z > 0, p, 1 - p), -1) for z in subsets], -1)  # [2, 8]
    loss, figures = expected_loss(logits, reference, rewards, subsets, beta=0.3)
    assert torch.allclose(loss, -((pi * rewards).sum(-1) - 0.3 * kl).mean(), atol=1e-5)
    assert figures["kl"] == pytest.approx(kl.mean().item(), abs=1e-5)
    assert figures["p_mean"] == pytest.approx(p.mean().item(), abs=1e-6)
    mask = torch.tensor([[1.0, 0, 0, 1, 0, 0, 0, 1], [0, 1, 1, 0, 0, 0, 0, 0]])
    masked, figures = expected_loss(logits, logits, rewards, subsets, beta=0.0, mask=mask)
    weights = pi * mask / (pi * mask).sum(-1, keepdim=True)
    assert torch.allclose(-masked, (weights * rewards).sum(-1).mean(), atol=1e-5)
    assert figures["expected_reward"] == pytest.approx((weights * rewards).sum(-1).mean().item(), abs=1e-5)
    assert subset_matrix(1).tolist() == [[0.0], [1.0]] and subset_matrix(2).tolist()[1] == [0.0, 1.0]
    assert subset_matrix(12).shape == (4096, 12)
    with pytest.raises(ValueError, match="T <= 12"):
        subset_matrix(13)


def test_the_exact_loss_is_the_enumerated_expectation_minus_the_kl_to_the_reference():
    """Every subset enumerated by hand: π(z) = Π p^z (1-p)^(1-z), the reward's expectation under π (under a mask,
    over the asked subsets with π renormalised) and the Bernoulli KL to the reference, weighted by beta.  Kills
    the mutation pass's survivors in exact.py: a sign dropped from the reference's log(1-p), from the mask's
    -inf, or from the loss."""
    import itertools
    import math

    from autagent.policies.router.exact import expected_loss, subset_matrix

    torch.manual_seed(0)
    tools, beta = 3, 0.3
    logits, reference = torch.randn(2, tools), torch.randn(2, tools)
    rewards = torch.randn(2, 2**tools)
    subsets = subset_matrix(tools)
    mask = torch.tensor([[1.0, 0, 1, 1, 0, 0, 1, 0], [0, 1, 1, 0, 0, 1, 0, 1]])
    for masked in (None, mask):
        loss, figures = expected_loss(logits, reference, rewards, subsets, beta, masked)
        want = []
        for b in range(2):
            p, q = torch.sigmoid(logits[b]).tolist(), torch.sigmoid(reference[b]).tolist()
            pi = [
                math.prod(pt if z else 1 - pt for pt, z in zip(p, row))
                for row in itertools.product((0, 1), repeat=tools)
            ]
            keep = [1.0] * len(pi) if masked is None else masked[b].tolist()
            total = sum(w * k for w, k in zip(pi, keep))
            expected = sum(w * k * r for w, k, r in zip(pi, keep, rewards[b].tolist())) / total
            kl = sum(a * math.log(a / c) + (1 - a) * math.log((1 - a) / (1 - c)) for a, c in zip(p, q))
            want.append(expected - beta * kl)
        assert loss.item() == pytest.approx(-sum(want) / 2, abs=1e-5), masked
        assert figures["kl"] > 0

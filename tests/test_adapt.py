"""Training against a new reasoner: the answer table and its budget, the exact objective, the price,
cross-validation, the warm start and ``autagent adapt`` end to end, on tiny reasoners."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from autagent.cli import main
from autagent.data.sample import Sample
from autagent.policies.router.answers import AnswerSource
from autagent.policies.router.config import RouterGRPOConfig
from autagent.policies.router.crossval import CrossValConfig, cross_validate
from autagent.policies.router.exact import expected_loss, subset_matrix
from autagent.policies.router.model import Router, RouterConfig
from autagent.policies.router.table import AnswerTable, Budget, designed_subsets, every_subset
from autagent.policies.router.train import RouterTrainer
from autagent.reasoners.base import CachedReasoner, ReasonerFailing, Reply

TOOLS = ("asr", "emotion", "chords")


class AdditiveReasoner:
    """Each labelled tool's record adds 1 to the right choice's score, every other record 0.45 to the
    first wrong choice: a tool that reveals the answer helps, a pile of others drowns it. Counts what it
    is asked; fails every call from ``fail_after`` answers on."""

    name = "additive"

    def __init__(self, fail_after: int | None = None):
        self.asked, self.fail_after = 0, fail_after

    def fingerprint(self) -> str:
        return "additive-1"

    def answer_many(self, requests):
        out = []
        for sample, records in requests:
            if self.fail_after is not None and self.asked >= self.fail_after:
                out.append(Reply(None, "the server went away"))
                continue
            self.asked += 1
            scores = [0.0] * len(sample.choices)
            right = sample.choices.index(sample.answer)
            scores[(right + 1) % len(scores)] += 0.2  # no tool: wrong
            for record in records or []:
                if record["tool"] in sample.meta["tools"]:
                    scores[right] += 1.0
                else:
                    scores[(right + 1) % len(scores)] += 0.45
            out.append(Reply(sample.choices[max(range(len(scores)), key=scores.__getitem__)], scores=tuple(scores)))
        return out


def _samples(n: int = 12) -> tuple[list[Sample], dict]:
    samples, records = [], {}
    for i in range(n):
        needed = [TOOLS[i % len(TOOLS)]]
        samples.append(
            Sample(f"q{i}", "", f"question {i}", ("a", "b", "c"), "abc"[i % 3], "speech", "", {"tools": needed})
        )
        records[f"q{i}"] = {t: {"tool": t, "output": f"{t} of q{i}"} for t in TOOLS}
    return samples, records


def _filled(tmp_path, budget=None, inner=None, design=("empty", "singles", "all")):
    samples, records = _samples()
    inner = inner or AdditiveReasoner()
    reasoner = CachedReasoner(inner, tmp_path / "answers", max_failure_rate=0.05, min_calls=3)
    spent = Budget(budget, tmp_path / "budget.json")
    table = AnswerTable(samples, TOOLS, design).fill(reasoner, records, spent, items_per_call=2)
    return table, spent, inner, reasoner, samples, records


def test_the_design_and_every_subset():
    assert designed_subsets(TOOLS, ["empty", "singles", "all"]) == [(), ("asr",), ("emotion",), ("chords",), TOOLS]
    loo = designed_subsets(TOOLS, ["empty", "leave_one_out"])
    assert loo == [(), ("emotion", "chords"), ("asr", "chords"), ("asr", "emotion")]
    subsets = every_subset(TOOLS)
    rows = subset_matrix(len(TOOLS))
    assert len(subsets) == 8 and [tuple(t for t, on in zip(TOOLS, r) if on) for r in rows.tolist()] == subsets


def test_the_budget_is_never_exceeded_and_cached_answers_are_free(tmp_path):
    """12 queries x 5 designed subsets = 60 answers; a budget of 23 asks 23 and stops, keeping the
    4 queries whose design is whole; a second table on the same cache with no budget left asks nothing
    for those 23 and the rest only once the budget allows."""
    table, spent, inner, reasoner, samples, records = _filled(tmp_path, budget=23)
    assert inner.asked == 23 == spent.spent and json.loads((tmp_path / "budget.json").read_text())["spent"] == 23
    assert len(table.items) == 4 and len(table.incomplete) == 8
    again = AnswerTable(samples, TOOLS).fill(reasoner, records, Budget(0), items_per_call=2)
    assert inner.asked == 23 and len(again.items) == 4  # all served from the cache, none asked
    Budget(None, tmp_path / "budget.json")  # a stopped run's spending is read back
    assert Budget(40, tmp_path / "budget.json").left == 17


def test_the_surrogate_adds_tools_and_says_how_often_it_agrees(tmp_path):
    """The additive reasoner is exactly additive in its scores: the surrogate predicts every subset
    never asked as the reasoner would answer it, and all tools from the singles on every query."""
    table, *_, reasoner, samples, records = _filled(tmp_path)
    for sample in samples:
        for subset in every_subset(TOOLS):
            if not table.asked(sample.id, subset):
                (truth,) = reasoner.ask([(sample, [records[sample.id][t] for t in subset])])
                assert table.answer(sample.id, subset) == truth.text, (sample.id, subset)
    assert table.surrogate_fidelity()["all"] == {"agree": 1.0, "n": 12}


def test_the_exact_objective_is_the_expected_reward_and_ignores_the_baseline_term():
    torch.manual_seed(0)
    logits = torch.randn(4, 3, requires_grad=True)
    rewards = torch.randn(4, 8)
    subsets = subset_matrix(3)
    loss, stats = expected_loss(logits, logits.detach(), rewards, subsets, beta=0.0)
    p = torch.sigmoid(logits)
    brute = torch.stack(
        [
            sum(torch.prod(torch.where(z > 0, p[b], 1 - p[b])).item() * rewards[b, j] for j, z in enumerate(subsets))
            for b in range(4)
        ]
    )
    assert torch.allclose(-loss, brute.mean(), atol=1e-5) and abs(stats["kl"]) < 1e-6
    (grad,) = torch.autograd.grad(loss, logits)
    shifted, _ = expected_loss(logits, logits.detach(), rewards - torch.randn(4, 1), subsets, beta=0.0)
    (grad_shifted,) = torch.autograd.grad(shifted, logits)
    assert torch.allclose(grad, grad_shifted, atol=1e-6)  # a per-query constant (y_base) changes nothing


def test_the_price_changes_what_is_learned(tmp_path):
    """Free tools: the exact objective learns to call the tool each query needs; at a price above what
    an answer gained is worth (1.2) it learns to call nothing."""
    table, *_, samples, _ = _filled(tmp_path)
    features = torch.randn(len(samples), 8, generator=torch.Generator().manual_seed(1))
    needed = [TOOLS.index(s.meta["tools"][0]) for s in samples]
    chosen = {}
    for price in (0.0, 1.2):
        torch.manual_seed(0)
        policy = Router(8, RouterConfig(hidden=16), len(TOOLS))
        grpo = RouterGRPOConfig(
            steps=80, batch_size=6, learning_rate=0.05, beta=0.0, objective="expected", inner_epochs=1, tool_cost=price
        )
        answers = AnswerSource(None, {}, TOOLS, table=table)
        trainer = RouterTrainer(policy, features, samples, answers, grpo)
        history = trainer.train()
        chosen[price] = policy.select(features)
        assert history[-1]["expected_reward"] > history[0]["expected_reward"]
    assert all(chosen[0.0][i, t] == 1 for i, t in enumerate(needed)) and chosen[0.0].sum(-1).max() < 3
    assert chosen[1.2].sum() == 0


def test_cross_validation_scores_held_out_queries_from_the_table_and_prefers_fewer_tools(tmp_path):
    """Two candidates equal on held-out reward (the free price learns the needed tool and more): the
    one-standard-error rule takes the one calling fewer tools; the criterion is the user's price."""
    table, *_, samples, _ = _filled(tmp_path)
    features = torch.randn(len(samples), 8, generator=torch.Generator().manual_seed(2))

    class Fixed:
        def __init__(self, rows):
            self.rows = rows

        def select(self, feats):
            return self.rows.expand(len(feats), -1)

    def train(index, candidate):
        return Fixed(torch.tensor([[1.0, 1.0, 1.0]]) if candidate["reward.tool_cost"] == 0 else torch.zeros(1, 3))

    config = CrossValConfig(folds=3, grid={"reward.tool_cost": [0.0, 0.5]}, one_se=True)
    found = cross_validate(config, samples, features, table, train, TOOLS, price=0.0)
    rewards = {c["candidate"]["reward.tool_cost"]: c for c in found["candidates"]}
    assert rewards[0.0]["accuracy"] == 0.0 and rewards[0.5]["accuracy"] == 0.0  # all tools drown it; none is wrong
    assert found["chosen"] == {"reward.tool_cost": 0.5} and rewards[0.0]["avg_tools"] == 3.0
    assert rewards[0.0]["asked"] == 1.0  # all tools is in the design: a real answer, not the surrogate's
    best = cross_validate(CrossValConfig(folds=3, grid=config.grid), samples, features, table, train, TOOLS, 0.0)
    assert best["chosen"] == best["best"] == {"reward.tool_cost": 0.0}  # the best mean (the first of a tie)
    priced = cross_validate(config, samples, features, table, train, TOOLS, price=0.1)
    assert priced["best"] == {"reward.tool_cost": 0.5}  # at the user's price, three calls cost 0.3


def test_a_failing_reasoner_stops_the_table_and_a_resume_asks_only_the_rest(tmp_path):
    with pytest.raises(ReasonerFailing):
        _filled(tmp_path, inner=AdditiveReasoner(fail_after=17))
    kept = (tmp_path / "answers" / "additive-1.jsonl").read_text().splitlines()
    assert len(kept) == 17 and all(json.loads(line)["scores"] for line in kept)
    spent = json.loads((tmp_path / "budget.json").read_text())["spent"]
    assert spent >= 17  # the failed calls were asked too
    table, budget, inner, *_ = _filled(tmp_path)
    assert inner.asked == 60 - 17 and len(table.items) == 12 and budget.spent == spent + 43


# -- the warm start and autagent adapt, end to end ---------------------------------------------------


@pytest.fixture(scope="module")
def trained(tiny_bench, tmp_path_factory):
    """A tiny plugin trained against the embedded reasoner (the source every adaptation starts from)."""
    root = tmp_path_factory.mktemp("adapt")
    config = {
        "name": "source",
        "output_dir": str(root / "runs"),
        "answer_cache_dir": str(root / "answers"),
        "data": {"train": str(tiny_bench["paths"]["train"]), "test": str(tiny_bench["paths"]["test"])},
        "tools": {"executor": "local", "cache_dir": str(tiny_bench["cache"]), "enabled": list(tiny_bench["tools"])},
        "grpo": {"steps": 3, "batch_size": 8},
        "policy": {"router": {"ensemble": 2, "scorer": "factored", "learning_rate": 0.01}},
        "eval": {"methods": ["no_tool"]},
        "logging": {"wandb": False, "progress": False},
    }
    path = root / "source.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(path)]) == 0
    return root, path, root / "runs" / "source" / "plugin"


def _mine(tiny_bench, tmp_path) -> list[str]:
    """What the user of ``autagent adapt`` gives: the data file, the tools' cache and executor, where the run
    and the answers go (a plugin decides none of them: tests/test_plugin_provenance.py)."""
    return [
        *("--set", f"data.train={tiny_bench['paths']['train']}", "--set", f"tools.cache_dir={tiny_bench['cache']}"),
        *("--set", "tools.executor=local", "--set", f"output_dir={tmp_path / 'runs'}"),
        *("--set", f"answer_cache_dir={tmp_path / 'answers'}"),
    ]


def test_a_warm_started_router_selects_as_its_source_and_keeps_it_as_reference(trained, tiny_bench, tmp_path):
    from autagent.api import load
    from autagent.policies.router.warm import load_warm_start

    _, _, plugin_dir = trained
    source = load(plugin_dir)
    warm = load_warm_start(plugin_dir, tiny_bench["tools"])
    features = warm.featurizer.of_samples(tiny_bench["test"])
    for m, member in enumerate(source.router.members):
        assert torch.equal(warm.member(m).select(features), member.select(features))
    with pytest.raises(Exception, match="the plugin learned the tools"):
        load_warm_start(plugin_dir, tiny_bench["tools"][:3])
    out = tmp_path / "adapted"
    command = ["adapt", "--plugin", str(plugin_dir), "--reasoner", "embedded", "--out", str(out)]
    settings = ["--set", "grpo.steps=1", "--set", "policy.router.learning_rate=1.0e-12"]
    settings += ["--set", "policy.router.table.crossval.folds=0"]
    settings += _mine(tiny_bench, tmp_path)
    assert main([*command, "--budget", "60", "--no-certify", *settings]) == 0  # no certified point: the threshold
    adapted = load(out)
    assert adapted.select_many(tiny_bench["test"]) == source.select_many(tiny_bench["test"])


def test_autagent_adapt_spends_at_most_its_budget_cross_validates_and_says_so(trained, tiny_bench, tmp_path, capsys):
    from autagent.api import load

    _, _, plugin_dir = trained
    out = tmp_path / "adapted"
    where = _mine(tiny_bench, tmp_path)
    fast = ["--set", "grpo.steps=20", "--set", "policy.router.table.crossval.folds=2"]
    grid = "{reward.tool_cost: [0.0, 0.05], policy.router.learning_rate: [0.003]}"
    fast += ["--set", f"policy.router.table.crossval.grid={grid}"]
    command = ["adapt", "--plugin", str(plugin_dir), "--reasoner", "embedded", "--out", str(out), "--budget", "100"]
    command += ["--no-certify"]  # the whole budget for the table (test_certify's adapt test holds queries out)
    assert main([*command, "--tool-cost", "0.01", *where, *fast]) == 0
    printed, warned = capsys.readouterr()
    assert "answers: 100 of a budget of 100" in printed and "cross-validated (2 folds, price 0.01)" in printed
    used = json.loads((out / "manifest.json").read_text())["metrics"]["training"]["table"]["queries"]
    assert f"warning: the budget completed only {used} of " in warned  # a small budget, said
    manifest = json.loads((out / "manifest.json").read_text())
    training = manifest["metrics"]["training"]
    assert training["table"]["answers_spent"] == 100 and training["reasoner"].startswith("embedded-")
    assert (
        training["init_from"]["content_hash"] == json.loads((plugin_dir / "manifest.json").read_text())["content_hash"]
    )
    assert training["price"] == 0.01 and training["training_price"] in (0.0, 0.05)
    card = (out / "README.md").read_text()
    assert "answers asked: 100 (budget: 100)" in card and "cross-validation" in card
    assert load(out).select_many(tiny_bench["test"])  # a working plugin
    assert main([*command, *where]) == 2 and "exists" in capsys.readouterr().err  # never overwritten


def test_autagent_adapt_asks_a_served_model_once_before_any_work_and_refuses_a_budget_too_small(
    trained, tiny_bench, tmp_path, capsys
):
    """``--upstream URL`` with nothing listening: one line naming the URL, before any tool runs or folder is made
    (it once computed every tool record, printed 200 retries and failed); a budget that cannot complete one
    query's design is refused before anything is spent, naming the smallest that works."""
    _, _, plugin_dir = trained
    out = tmp_path / "adapted"
    command = ["adapt", "--plugin", str(plugin_dir), "--upstream", "http://127.0.0.1:9/v1", "--out", str(out)]
    assert main([*command, *_mine(tiny_bench, tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "nothing answers at http://127.0.0.1:9/v1/models" in err and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "runs").exists()
    command = ["adapt", "--plugin", str(plugin_dir), "--reasoner", "embedded", "--out", str(out), "--budget", "10"]
    assert main([*command, *_mine(tiny_bench, tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        "--budget 10 cannot complete one training query's 16 answers" in err and "the smallest that works is 21" in err
    )
    assert main([*command, "--no-certify", *_mine(tiny_bench, tmp_path)]) == 2
    assert "the smallest that works is 16" in capsys.readouterr().err and not (tmp_path / "runs").exists()
    assert main(["adapt", "--plugin", str(plugin_dir), "--out", str(out)]) == 2
    assert "--reasoner NAME, or --upstream URL" in capsys.readouterr().err


def test_adapt_resume_goes_on_from_a_table_a_failing_reasoner_stopped(trained, tiny_bench, tmp_path, monkeypatch):
    """The error of a reasoner that fails while the table fills says "--resume"; the resumed run (its folder holds
    budget.json and no checkpoint) asks the rest of the table and trains, where it once stopped on "no checkpoint"."""
    import autagent.policies.router.table as table
    from autagent.api import load
    from autagent.reasoners.base import ReasonerFailing

    _, _, plugin_dir = trained
    asked_once = []

    def fails_the_second_time(reasoner, requests, budget):
        if asked_once:
            raise ReasonerFailing("the reasoner went away")
        asked_once.append(len(requests))
        return ask_within(reasoner, requests, budget)

    ask_within = table.ask_within
    out = tmp_path / "adapted"
    command = ["adapt", "--plugin", str(plugin_dir), "--reasoner", "embedded", "--out", str(out), "--budget", "60"]
    command += ["--no-certify", "--set", "grpo.steps=2", "--set", "policy.router.table.crossval.folds=0"]
    command += ["--set", "policy.router.table.items_per_call=1"]  # a query's 16 subsets a call: four calls
    command += _mine(tiny_bench, tmp_path)
    monkeypatch.setattr(table, "ask_within", fails_the_second_time)
    assert main(command) == 2 and not out.exists()
    run_dir = tmp_path / "runs" / "adapt-adapted"
    assert json.loads((run_dir / "budget.json").read_text())["spent"] == asked_once[0]
    assert not (run_dir / "checkpoints").exists()
    monkeypatch.setattr(table, "ask_within", ask_within)
    assert main([*command, "--resume"]) == 0
    assert json.loads((run_dir / "budget.json").read_text())["spent"] == 60
    assert load(out).select_many(tiny_bench["test"])


def test_a_failed_adaptation_reruns_with_the_same_out_and_pays_only_for_answers_received(trained, tiny_bench, tmp_path):
    """A server that fails mid-table: the answers it gave are charged and cached, the failed calls are not; a plain
    re-run with the same --out starts over (it was refused: 'already holds a run') and asks only what it lacked."""
    from autagent.reasoners.embedded import EmbeddedReasoner

    _, _, plugin_dir = trained
    calls = {"n": 0}
    answer_many = EmbeddedReasoner.answer_many

    def flaky(self, requests, *args, **kwargs):  # the server answers 20 questions, then every call fails
        calls["n"] += len(requests)
        replies = answer_many(self, requests, *args, **kwargs)
        return [
            r if calls["n"] - len(requests) + i < 20 else r._replace(text=None, error="HTTP 503")
            for i, r in enumerate(replies)
        ]

    out = tmp_path / "adapted"
    command = ["adapt", "--plugin", str(plugin_dir), "--reasoner", "embedded", "--out", str(out), "--budget", "80"]
    command += ["--no-certify", "--set", "grpo.steps=1", "--set", "policy.router.table.crossval.folds=0"]
    command += ["--set", "policy.router.table.items_per_call=1", "--set", "reasoner.min_calls=30"]
    command += _mine(tiny_bench, tmp_path)
    EmbeddedReasoner.answer_many = flaky
    try:
        assert main(command) == 2 and not out.exists()
    finally:
        EmbeddedReasoner.answer_many = answer_many
    run_dir = tmp_path / "runs" / "adapt-adapted"
    assert json.loads((run_dir / "budget.json").read_text())["spent"] == 20  # the 20 received, not the failures
    assert main(command) == 0 and out.exists()  # the same command again: starts over, the 20 served from the cache


def test_configs_that_cannot_train_fail_at_load():
    from autagent.config import ConfigError, load_config

    for overrides, message in (
        ({"grpo.steps": 0}, "exports the plugin of policy.init_from"),
        ({"policy.router.objective": "expected"}, "policy.router.table.enabled"),
        ({"policy.router.table.budget": 0}, "policy.router.table.budget must be a positive integer"),
        ({"policy.router.table.design": ["singles"]}, "must hold 'empty'"),
        ({"policy.router.table.crossval.folds": 1}, "folds must be 0"),
        ({"policy.router.table.crossval.grid": {"policy.router.hidden": [8]}}, "cannot be cross-validated"),
        ({"reward.signal": "confidence"}, "policy.router.objective: expected"),
        ({"policy.kind": "lm", "policy.init_from": "x"}, "policy.kind must be router"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config(None, overrides)


def test_the_price_check_says_what_the_price_means_against_a_reasoner():
    """The cascade's own figures (150 items): All-Tools gains 17.3 points over No-Tool; at 0.05 a call its
    seven calls cost 0.35, so the objective prefers silence to it; at 0.01 it earns 0.103."""
    from autagent.evaluation.summary import price_check

    block = {
        "no_tool": {"accuracy": 0.247, "avg_tools": 0.0},
        "all_tools": {"accuracy": 0.420, "avg_tools": 7.0},
        "oracle_labels": {"accuracy": 0.473, "avg_tools": 1.04},
    }
    assert price_check(block, 0.05) == {"price": 0.05, "no_tool": 0.0, "all_tools": -0.177, "oracle_labels": 0.174}
    assert price_check(block, 0.01)["all_tools"] == 0.103 and price_check({}, 0.01) == {}


OLD_RECORD = {  # a plugin's training config as recorded before issue 52 moved the one-policy keys
    "name": "source",
    "seed": 3,
    "grpo": {"steps": 7, "credit": "tool", "learning_rate": 0.01, "entropy_coef": 0.02, "loss_type": "dapo"},
    "table": {"crossval": {"one_se": True, "folds": 2, "grid": {"grpo.learning_rate": [1.0]}}, "budget": 5},
}
NEW_RECORD = {
    "name": "source",
    "seed": 3,
    "grpo": {"steps": 7},
    "policy": {
        "router": {
            "credit": "tool",
            "learning_rate": 0.01,
            "entropy_coef": 0.02,
            "table": {"crossval": {"one_se": True, "folds": 2, "grid": {"policy.router.learning_rate": [1.0]}}},
        },
        "lm": {"loss_type": "dapo"},
    },
}


@pytest.mark.parametrize("recorded", [OLD_RECORD, NEW_RECORD], ids=["before issue 52", "after"])
def test_an_adaptation_takes_its_table_settings_from_adapt_not_from_the_source_run(monkeypatch, recorded):
    """The source plugin's recorded config may carry table settings of its own run (the one-standard-error
    rule, another grid): the adaptation's are ADAPT_DEFAULTS' and the user's, the rest is the plugin's.
    A plugin recorded before the one-policy keys moved (``grpo.credit``, the top-level ``table``) adapts
    the same: its config is migrated on read, where a user's config with those keys is refused."""
    from autagent.config import ConfigError, config_from_mapping, migrate_moved
    from autagent.recipes import adapt

    monkeypatch.setattr(adapt, "read_manifest", lambda _: {"policy": "router", "training_config": recorded})
    config = adapt.adapt_config("plugin", "cascade", "out", budget=100, tool_cost=0.01)
    table = config.policy.router.table
    assert table.crossval.one_se is False and table.crossval.folds == 4 and table.budget == 100
    assert table.crossval.grid == adapt.ADAPT_DEFAULTS["policy.router.table.crossval.grid"]
    assert config.seed == 3 and config.reasoner.kind == "cascade" and config.reward.tool_cost == 0.01
    assert config.grpo.steps == adapt.ADAPT_DEFAULTS["grpo.steps"] and config.name == "adapt-out"
    router = config.policy.router
    assert (router.credit, router.learning_rate, router.entropy_coef) == ("tool", 0.01, 0.02)
    assert config.policy.lm.loss_type == "grpo"  # adapt trains routers: the LM policy's settings are the user's
    if recorded is OLD_RECORD:
        with pytest.raises(ConfigError, match="grpo.credit moved to policy.router.credit"):
            config_from_mapping(recorded)
        migrated = migrate_moved(recorded)["policy"]["router"]["table"]["crossval"]["grid"]
        assert migrated == {"policy.router.learning_rate": [1.0]}  # the grid's keys follow


def test_a_budget_that_counts_the_answers_used_buys_the_same_table_whatever_the_cache_holds(tmp_path):
    """``budget_counts: used``: 23 answers of 5 subsets buy 4 queries, with a cold cache or a warm one;
    with ``asked`` (a user's budget) the warm cache's answers are free and buy more."""
    _filled(tmp_path)  # a warm cache: every query's design answered
    samples, records = _samples()
    reasoner = CachedReasoner(AdditiveReasoner(), tmp_path / "answers")
    used = AnswerTable(samples, TOOLS).fill(reasoner, records, Budget(23), counts="used")
    asked = AnswerTable(samples, TOOLS).fill(reasoner, records, Budget(23), counts="asked")
    assert len(used.items) == 4 and len(asked.items) == 12 and reasoner.calls == 0
    cold = AnswerTable(samples, TOOLS).fill(
        CachedReasoner(AdditiveReasoner(), tmp_path / "cold"), records, Budget(23), counts="used"
    )
    assert cold.items == used.items


def test_the_objective_over_asked_subsets_alone_never_reads_the_surrogate():
    """``table.unasked: excluded``: π renormalised over the subsets the reasoner answered; a reward
    written for a subset never asked (what a surrogate would say) changes nothing."""
    torch.manual_seed(0)
    logits = torch.randn(2, 3, requires_grad=True)
    subsets = subset_matrix(3)
    mask = torch.tensor([[1.0, 1, 0, 0, 1, 0, 0, 1], [1.0, 0, 1, 0, 0, 0, 0, 1]])
    rewards = torch.randn(2, 8)
    loss, _ = expected_loss(logits, logits.detach(), rewards, subsets, 0.0, mask)
    lied = rewards.masked_fill(mask == 0, 5.0)  # the surrogate's guesses on the unasked subsets
    loss_lied, _ = expected_loss(logits, logits.detach(), lied, subsets, 0.0, mask)
    assert torch.allclose(loss, loss_lied)
    p = torch.sigmoid(logits)
    pi = torch.stack([torch.prod(torch.where(z > 0, p, 1 - p), dim=-1) for z in subsets], dim=-1)
    expected = ((pi * mask * rewards).sum(-1) / (pi * mask).sum(-1)).mean()
    assert torch.allclose(-loss, expected, atol=1e-6)


def test_autagent_adapt_certifies_the_cheapest_safe_point_and_the_plugin_uses_it(trained, tiny_bench, tmp_path, capsys):
    """``--certify`` (on by default) holds 10 of the 40 training queries out of a 150-answer budget (50 answers at
    5 a query), never asks them for the table, certifies on them after training, writes the certificate into the
    manifest and the card, and the plugin selects at the certified point unless told otherwise."""
    from autagent.api import Plugin

    _, _, plugin_dir = trained
    out = tmp_path / "adapted"
    command = ["adapt", "--plugin", str(plugin_dir), "--reasoner", "embedded", "--out", str(out), "--budget", "150"]
    command += ["--certify", "0.5", "--set", "grpo.steps=2", "--set", "policy.router.table.crossval.folds=0"]
    command += [
        "--set",
        f"data.train={tiny_bench['paths']['train']}",
        "--set",
        f"data.test={tiny_bench['paths']['test']}",
    ]
    command += _mine(tiny_bench, tmp_path)
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "answers: 100 of a budget of 100 (150 less 50 for the certificate's 10 held-out queries)" in printed
    assert "certificate: " in printed
    manifest = json.loads((out / "manifest.json").read_text())
    certificate = manifest["certificate"]
    assert certificate["n"] == 10 and certificate["eps"] == 0.5 and certificate["reasoner"].startswith("embedded-")
    assert certificate["answers_asked"] <= 50 and [r["label"] for r in certificate["tested"]][-1] in (
        "K=1",
        "threshold",
    )
    training = manifest["metrics"]["training"]
    assert training["held_out_queries"] == 10 and training["table"]["budget"] == 100
    assert training["table"]["queries"] + training["table"]["queries_left_out"] == 30  # 40 less the 10 held out
    assert "## Certified operating point" in (out / "README.md").read_text()
    plugin = Plugin.load(out)
    assert plugin.certificate == certificate
    dial = plugin.plugin.dial
    assert (dial.describe() if dial else {}) == certificate["point"]
    samples = tiny_bench["test"]
    threshold = plugin.set_dial(uncertified=True).plugin.select_many(samples)
    exact = plugin.set_dial(tools=1).plugin.select_many(samples)
    assert all(len(z) == 1 for z in exact) and threshold != exact

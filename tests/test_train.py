"""GRPO on the router against the real embedded reasoner: learning, the advantage estimators'
effect on the two rewards, resume, call accounting."""

from __future__ import annotations

import json

import pytest
import torch

from autagent.policies.router.answers import AnswerSource
from autagent.policies.router.config import RouterGRPOConfig
from autagent.policies.router.features import Featurizer
from autagent.policies.router.model import Router, RouterConfig
from autagent.policies.router.train import RouterTrainer, TrainingRun
from autagent.reasoners import CachedReasoner
from autagent.reasoners.base import Reply
from autagent.reasoners.embedded import EmbeddedReasoner, EmbeddedReasonerConfig


@pytest.fixture(scope="module")
def setup(tiny_bench):
    featurizer = Featurizer(RouterConfig())
    samples = tiny_bench["train"]
    features = featurizer.of_samples(samples)
    reasoner = CachedReasoner(EmbeddedReasoner(EmbeddedReasonerConfig()), None)
    return featurizer, samples, features, tiny_bench["records"], reasoner, tiny_bench["tools"]


def _trainer(
    setup, steps, run_dir=None, seed=0, reward="differential", advantage="reward", tool_cost=0.0, router=None, **grpo
):
    featurizer, samples, features, records, reasoner, tools = setup
    torch.manual_seed(seed)
    policy = Router(featurizer.dim, router or RouterConfig(), len(tools))
    grpo = RouterGRPOConfig(
        steps=steps, batch_size=8, group_size=6, learning_rate=0.01, beta=0.02, advantage=advantage, **grpo
    )
    grpo.reward_kind, grpo.tool_cost, grpo.seed = reward, tool_cost, seed
    answers = AnswerSource(reasoner, records, tools)
    return RouterTrainer(policy, features, samples, answers, grpo, TrainingRun(run_dir))


def _needed_tool_probability(trainer) -> float:
    probs = trainer.policy.tool_probabilities(trainer.features)
    values = [probs[i, trainer.tool_ids.index(t)] for i, s in enumerate(trainer.samples) for t in s.meta["tools"]]
    return float(torch.stack(values).mean())


def _other_tool_probability(trainer) -> float:
    probs = trainer.policy.tool_probabilities(trainer.features)
    needed = torch.zeros_like(probs, dtype=torch.bool)
    for i, s in enumerate(trainer.samples):
        needed[i, [trainer.tool_ids.index(t) for t in s.meta["tools"]]] = True
    return float(probs[~needed].mean())


def test_policy_moves_toward_rewarded_tools(setup):
    """What GRPO guarantees here, on any draw of the fixture: the sampled reward it ascends rises (the
    last ten steps' mean above the first ten's), and the labelled tools' probability rises by more than
    the other tools' (checked on five draws of the fixture, scripts/learning_draws.py: the margin was
    0.13 to 0.32).  It once asserted a rise of 0.1 in the labelled tools' own probability and a last
    batch's accuracy, which held on some draws of the fixture only."""
    trainer = _trainer(setup, steps=40)
    before, others_before = _needed_tool_probability(trainer), _other_tool_probability(trainer)
    history = trainer.train()
    after, others_after = _needed_tool_probability(trainer), _other_tool_probability(trainer)
    assert (after - before) - (others_after - others_before) > 0.05, (before, after, others_before, others_after)
    rewards = [h["reward_mean"] for h in history]
    assert sum(rewards[-10:]) > sum(rewards[:10]), rewards


def test_the_rewards_train_the_same_policy_under_group_and_different_ones_under_reward(setup):
    """Under Eq. 2 the two rewards give the same advantages, so the same policy (up to float rounding,
    which Adam can magnify on parameters whose gradient is ~0); under A = r they train apart."""

    def probabilities(reward, advantage):
        trainer = _trainer(setup, steps=6, reward=reward, advantage=advantage)
        trainer.train()
        return trainer.policy.tool_probabilities(trainer.features)

    same = (probabilities("differential", "group") - probabilities("binary", "group")).abs().max()
    apart = (probabilities("differential", "reward") - probabilities("binary", "reward")).abs().max()
    assert same < 1e-3 and apart > 0.05, (float(same), float(apart))


def _empty_subset_probability(trainer) -> float:
    empty = torch.zeros(len(trainer.features), 1, len(trainer.tool_ids))
    return float(trainer.policy.log_prob(trainer.features, empty).exp().mean())


@pytest.mark.parametrize("abstain", [False, True])
def test_a_tool_cost_teaches_the_router_to_call_nothing(setup, abstain):
    """Priced calls (0.3 a tool, more than most records are worth here) move mass onto the empty
    subset, with or without the explicit no-tool action; unpriced, the same run does not."""
    router = RouterConfig(abstain=abstain)
    priced, free = (_trainer(setup, steps=30, tool_cost=cost, router=router) for cost in (0.3, 0.0))
    before = _empty_subset_probability(priced)
    for trainer in (priced, free):
        trainer.train()
    assert _empty_subset_probability(priced) > before + 0.25, (before, _empty_subset_probability(priced))
    assert _empty_subset_probability(priced) > _empty_subset_probability(free) + 0.2


def test_an_entropy_bonus_keeps_sampling_the_tools_a_price_would_silence(setup):
    """With every call priced above what it is worth, the tools' entropy collapses; the same run with
    ``entropy_coef`` keeps them sampled, and logs the entropy it pays for."""
    priced, kept = (_trainer(setup, steps=30, tool_cost=0.3, entropy_coef=coef) for coef in (0.0, 0.5))
    start = priced.policy.tool_entropy(priced.features).item()
    logs = {name: trainer.train() for name, trainer in (("priced", priced), ("kept", kept))}
    after = {name: t.policy.tool_entropy(t.features).item() for name, t in (("priced", priced), ("kept", kept))}
    assert after["priced"] < start - 0.1 and after["kept"] > after["priced"] + 0.1, (start, after)
    assert "entropy" in logs["kept"][-1] and "entropy" not in logs["priced"][-1]
    with pytest.raises(ValueError, match="entropy_coef"):
        RouterGRPOConfig(entropy_coef=-0.1)


def test_tool_credit_gives_each_decision_what_flipping_it_changes(setup, monkeypatch):
    """``policy.router.credit: tool``: the advantage of tool t in draw z is r(z) − r(z with t flipped), from
    answers the reasoner really gave for the flipped subsets, on per-tool log-probabilities."""
    import autagent.policies.router.train as train_module
    from rewards import get_reward

    seen = []
    real_loss = train_module.grpo_loss
    monkeypatch.setattr(train_module, "grpo_loss", lambda *a, **k: seen.append(a) or real_loss(*a, **k))
    trainer = _trainer(setup, steps=1, credit="tool", tool_cost=0.05)
    generator = torch.Generator().manual_seed(trainer.seed * 1_000_003)
    draws = trainer.policy.sample(trainer.features[trainer.batch_indices(0)], 6, generator)
    trainer.train()
    logp_new, _, _, advantage = seen[0][:4]
    assert logp_new.shape == advantage.shape == draws.shape  # [B, G, T]
    reward = get_reward("differential", 0.05)
    batch = [trainer.samples[i] for i in trainer.batch_indices(0)]

    def r(sample, row):
        subset = tuple(t for t, on in zip(trainer.tool_ids, row) if on)
        answer = trainer.counters.subset_memo[(sample.id, subset)] if subset else trainer.base_predictions[sample.id]
        return reward(
            prompts=[sample.question], completions=[",".join(subset)], predictions=[answer],
            base_predictions=[trainer.base_predictions[sample.id]], answer=[sample.answer],
            choices=[sample.choices], num_tools=[len(subset)],
        )[0]  # fmt: skip

    expected = torch.tensor(
        [
            [[r(s, row) - r(s, [1 - v if k == t else v for k, v in enumerate(row.tolist())]) for t in range(len(row))]
             for row in group]
            for s, group in zip(batch, draws)
        ]
    )  # fmt: skip
    assert torch.allclose(advantage, expected), (advantage - expected).abs().max()
    assert advantage.abs().sum() > 0


def test_under_tool_credit_the_two_rewards_train_the_same_router_and_it_learns(setup):
    """The differential reward's baseline cancels in r(z) − r(z'), so differential and binary train the
    same router (under A = r, the subset credit, they train apart: the test above); and it still moves
    toward the tools the questions need."""

    def trained(reward, steps=6):
        trainer = _trainer(setup, steps=steps, reward=reward, credit="tool")
        trainer.train()
        return trainer

    same = trained("differential").policy.tool_probabilities(setup[2])
    assert (same - trained("binary").policy.tool_probabilities(setup[2])).abs().max() < 1e-4
    learner = _trainer(setup, steps=40, credit="tool")
    before = _needed_tool_probability(learner)
    learner.train()
    assert _needed_tool_probability(learner) > before + 0.1


def test_tool_credit_is_refused_where_tools_are_not_drawn_apart():
    from autagent.config import ConfigError, load_config

    with pytest.raises(ValueError, match="advantage: reward"):
        RouterGRPOConfig(credit="tool", advantage="group")
    with pytest.raises(ValueError, match="policy.router.credit"):
        RouterGRPOConfig(credit="each")
    for overrides in ({"policy.router.abstain": True}, {"grpo.advantage": "group"}):
        with pytest.raises(ConfigError, match="policy.router.credit: tool"):
            load_config("experiments/embedded_main.yaml", {"policy.router.credit": "tool", **overrides})
    # the LM policy does not read the router's settings: they are not policed against it
    load_config("experiments/embedded_main.yaml", {"policy.kind": "lm", "grpo.advantage": "group"})


def test_resume_matches_an_uninterrupted_run(setup, tmp_path):
    straight = _trainer(setup, steps=6, run_dir=tmp_path / "a")
    straight.train()
    interrupted = _trainer(setup, steps=3, run_dir=tmp_path / "b")
    interrupted.train()
    with open(tmp_path / "b" / "train_log.jsonl", "a") as log:  # a step that ran but was never checkpointed
        log.write(json.dumps({"step": 4, "reward_mean": 9.9}) + "\n")
    resumed = _trainer(setup, steps=6, run_dir=tmp_path / "b", seed=0)
    resumed.train(resume=True)
    for (name, a), (_, b) in zip(straight.policy.state_dict().items(), resumed.policy.state_dict().items()):
        assert torch.equal(a, b), name
    log_a = [json.loads(line) for line in (tmp_path / "a" / "train_log.jsonl").read_text().splitlines()]
    log_b = [json.loads(line) for line in (tmp_path / "b" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log_b] == [1, 2, 3, 4, 5, 6]
    assert [r["reward_mean"] for r in log_a] == [r["reward_mean"] for r in log_b]
    assert len(list((tmp_path / "b" / "checkpoints").glob("step-*"))) == 2


def test_fresh_run_refuses_to_overwrite_and_resume_needs_checkpoint(setup, tmp_path):
    _trainer(setup, steps=1, run_dir=tmp_path / "r").train()
    with pytest.raises(FileExistsError, match="--resume"):
        _trainer(setup, steps=2, run_dir=tmp_path / "r").train()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        _trainer(setup, steps=2, run_dir=tmp_path / "empty").train(resume=True)


def test_reasoner_is_never_asked_twice_for_the_same_subset(setup):
    """Counted at the reasoner itself: every (query, records) request it receives over a run is new."""
    from autagent.reasoners.base import answer_key

    featurizer, samples, features, records, reasoner, tools = setup
    asked = []

    class Spy:
        failures = 0

        def answer_many(self, requests):
            asked.extend(answer_key(s, r) for s, r in requests)
            return reasoner.answer_many(requests)

        def check_health(self):
            pass

    trainer = _trainer((featurizer, samples, features, records, Spy(), tools), steps=8)
    trainer.train()
    assert len(asked) == len(set(asked)) and len(asked) > len(samples)  # y_base, then new subsets only
    assert len(asked) == trainer.counters.reasoner_calls < trainer.counters.naive_reasoner_calls == 8 * 8 * 7


def test_input_dropout_blanks_only_the_named_input_at_its_rate_and_is_validated(setup):
    from autagent.policies.router.model import drop_inputs

    featurizer, _, features, *_ = setup
    start, end = featurizer.columns["question"]
    assert list(featurizer.columns) == ["question", "choices", "audio"] and end - start == featurizer.text.dim
    wide = features.repeat(200 // len(features) + 1, 1)[:200]
    dropped = drop_inputs(wide, featurizer.columns, {"question": 0.5}, torch.Generator().manual_seed(0))
    blank = (dropped[:, start:end] == 0).all(dim=1)
    assert 0.35 < float(blank.float().mean()) < 0.65
    assert torch.equal(dropped[~blank], wide[~blank]) and torch.equal(dropped[:, end:], wide[:, end:])
    again = drop_inputs(wide, featurizer.columns, {"question": 0.5}, torch.Generator().manual_seed(0))
    assert torch.equal(dropped, again)  # seeded per step: resume replays the same masks
    for bad in ({"audio": 0.5, "nope": 0.1}, {"question": 1.0}):
        with pytest.raises(ValueError, match="input_dropout"):
            RouterConfig(inputs=["question", "choices"], input_dropout=bad)
    # the input ablations keep the default's dropout and fallback: an input not read has nothing to blank
    ablated = RouterConfig(
        inputs=["question"], input_dropout={"choices": 0.5, "question": 0.1}, unfamiliar_fallback={"choices": 0.01}
    )
    assert ablated.input_dropout == {"question": 0.1} and ablated.unfamiliar_fallback == {}


def test_choice_spread_says_what_the_options_differ_in():
    """Two option sets about one thing (a voice), one varying the mood and one the number of people:
    their means are close, their spreads are not; without ``choice_spread`` the feature is the mean alone."""
    moods = ("a happy voice", "a sad voice", "an angry voice", "a calm voice")
    counts = ("one voice", "two voices", "three voices", "four voices")
    plain = Featurizer(RouterConfig(inputs=["choices"]))
    spread = Featurizer(RouterConfig(inputs=["choices"], choice_spread=True))
    assert spread.dim == plain.dim + plain.text.dim
    dim = plain.text.dim
    rows = spread(["", ""], ["", ""], [moods, counts])
    means, spreads = rows[:, :dim], rows[:, dim : 2 * dim]
    assert torch.equal(plain(["", ""], ["", ""], [moods, counts])[:, :dim], means)
    # correlation (the router's LayerNorm centres its input; spreads are all positive)
    correlation = lambda a, b: float(torch.corrcoef(torch.stack([a, b]))[0, 1])  # noqa: E731
    assert correlation(spreads[0], spreads[1]) < correlation(means[0], means[1]) - 0.1, (
        correlation(spreads[0], spreads[1]),
        correlation(means[0], means[1]),
    )
    same = spread([""], [""], [("a happy voice",) * 4])
    assert float(same[0, dim : 2 * dim].abs().max()) < 1e-5  # identical options vary in nothing


def test_choice_contrast_embeds_only_what_the_options_disagree_about():
    """``contrast`` keeps the words some but not all options use; with ``choice_contrast`` the feature gains
    their embedding, so two option sets sharing a frame ("a violin playing ...") but varying different
    things are told apart more sharply than by their means."""
    from autagent.policies.router.features import contrast

    chords = ("a violin playing a D major chord", "a violin playing a D minor chord")
    players = ("a violin playing a D major chord", "a viola playing a D major chord")
    assert contrast(chords) == "major minor" and contrast(players) == "violin viola"
    assert contrast(("one option",)) == "" and contrast(()) == ""
    plain = Featurizer(RouterConfig(inputs=["choices"]))
    with_contrast = Featurizer(RouterConfig(inputs=["choices"], choice_contrast=True))
    dim = plain.text.dim
    assert with_contrast.dim == plain.dim + dim
    rows = with_contrast(["", ""], ["", ""], [chords, players])
    assert torch.equal(plain(["", ""], ["", ""], [chords, players])[:, :dim], rows[:, :dim])
    means, contrasts = rows[:, :dim], rows[:, dim : 2 * dim]
    cosine = lambda a, b: float(a @ b / (a.norm() * b.norm()))  # noqa: E731
    assert cosine(contrasts[0], contrasts[1]) < cosine(means[0], means[1]) - 0.2, (
        cosine(contrasts[0], contrasts[1]),
        cosine(means[0], means[1]),
    )
    assert torch.allclose(contrasts[0], torch.from_numpy(plain.text.encode(["major minor"])[0]))


def test_the_no_tool_action_is_one_more_way_to_the_empty_subset():
    """With ``abstain``, π is still a distribution over the 2^T subsets: the empty one gathers the
    abstentions plus the all-"no" draws, sampling agrees with log π, and greedy selection abstains
    when the call logit is negative, whatever the tool logits say."""
    import itertools

    torch.manual_seed(0)
    tools = 3
    router = Router(5, RouterConfig(abstain=True), tools)
    features = torch.randn(2, 5)
    every = torch.tensor(list(itertools.product([0.0, 1.0], repeat=tools))).expand(2, -1, -1)
    probabilities = router.log_prob(features, every).exp()
    assert torch.allclose(probabilities.sum(1), torch.ones(2), atol=1e-5)
    draws = router.sample(features, 20_000, torch.Generator().manual_seed(0))
    empty_share = (draws.sum(-1) == 0).float().mean(1)
    assert torch.allclose(empty_share, probabilities[:, 0], atol=0.015), (empty_share, probabilities[:, 0])
    tool_logits, call = router.heads(features)
    all_no = torch.sigmoid(-tool_logits).prod(-1)
    assert torch.allclose(probabilities[:, 0], torch.sigmoid(-call) + torch.sigmoid(call) * all_no)
    assert (probabilities[:, 0] > all_no + 0.15).all()  # σ(call_init = 1): a quarter of draws abstain
    with torch.no_grad():
        router.net[-1].bias.copy_(torch.tensor([4.0, 4.0, 4.0, -4.0]))
    assert router.select(features).sum() == 0
    with torch.no_grad():
        router.net[-1].bias[-1] = 4.0
    assert router.select(features).sum() == 2 * tools
    assert torch.allclose(router.tool_probabilities(features), torch.sigmoid(torch.tensor(4.0)) ** 2, atol=0.01)


class _Down:
    """A reasoner whose server answers the no-tool prompt and fails every call that shows records."""

    name = "down"
    where = "http://127.0.0.1:9/v1 (model test)"

    def fingerprint(self):
        return "down-1"

    def answer_many(self, requests):
        return [Reply(s.choices[0]) if r is None else Reply(None, "HTTP 503") for s, r in requests]


def test_a_failing_reasoner_stops_training_naming_the_server_and_its_last_failure(setup, tmp_path):
    """Failed calls are counted per step; past ``max_failure_rate`` the run stops with one clear error
    instead of training on failed answers, and the CLI prints it as one line."""
    from autagent.reasoners.base import ReasonerFailing

    featurizer, samples, features, records, _, tools = setup
    reasoner = CachedReasoner(_Down(), None, max_failure_rate=0.05, min_calls=len(samples) + 5)
    trainer = _trainer((featurizer, samples, features, records, reasoner, tools), steps=5)
    with pytest.raises(ReasonerFailing) as failure:
        trainer.train()
    message = str(failure.value)
    assert "reasoner http://127.0.0.1:9/v1 (model test)" in message and "last failure: HTTP 503" in message
    assert "max_failure_rate 5 %" in message and reasoner.failures > 0.05 * reasoner.calls
    healthy = _trainer(setup, steps=1)
    assert healthy.train()[-1]["reasoner_failures"] == 0


def test_unfamiliar_choices_are_blanked_when_selecting_and_the_cut_travels_with_the_weights(setup):
    """``unfamiliar_fallback``: choices less like any training query's than the cut are zeroed (as
    input_dropout zeroes them in training) before selecting; familiar ones are left alone; the bank and
    the cut are part of the state dict, so a plugin loaded elsewhere blanks the same queries."""
    featurizer, samples, features, *_ = setup
    config = RouterConfig(input_dropout={"choices": 0.5}, unfamiliar_fallback={"choices": 0.0})
    descriptions = featurizer.tool_descriptions(["a tool", "another tool"])
    torch.manual_seed(0)
    router = Router(featurizer.dim, config, 2, descriptions, featurizer.columns).eval()
    cuts = router.fit_familiarity(features)  # no dev: each training query against its nearest other one
    assert -1.0 < cuts["choices"] < 1.0
    strange = featurizer(
        [samples[0].question], [samples[0].audio], [("Form 1040 is due on April 15", "Form 1099 is due in May")]
    )
    queries = torch.cat([features[:3], strange])
    assert router.unfamiliar(queries)["choices"].tolist() == [False, False, False, True]
    start, end = featurizer.columns["choices"]
    blanked = router.blank_unfamiliar(queries)
    assert torch.equal(blanked[:3], queries[:3]) and torch.equal(blanked[3, :start], queries[3, :start])
    assert (blanked[3, start:end] == 0).all() and torch.equal(blanked[3, end:], queries[3, end:])
    as_selected = router.tool_probabilities(queries)
    assert torch.equal(as_selected, torch.sigmoid(router.logits(blanked)))
    assert not torch.allclose(as_selected[3], torch.sigmoid(router.logits(queries))[3])  # blanking mattered
    loaded = Router(featurizer.dim, config, 2, descriptions, featurizer.columns).eval()
    assert loaded.unfamiliar(queries) == {}  # never fitted: nothing is unfamiliar
    loaded.load_state_dict(router.state_dict())
    assert torch.equal(loaded.unfamiliar(queries)["choices"], router.unfamiliar(queries)["choices"])
    with pytest.raises(ValueError, match="unfamiliar_fallback"):
        RouterConfig(unfamiliar_fallback={"choices": 0.01})  # not blanked in training: the router never saw it

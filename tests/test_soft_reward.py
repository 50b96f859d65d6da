"""The soft reward (``reward.signal: confidence``): the reasoner's probability of the right choice from its
choice scores, with the subset minus without for the differential kind; equal to the 0/1 reward when the
scores are one-hot, fractional otherwise, and refused where no answer table holds scores."""

from __future__ import annotations

import numpy as np
import pytest

from autagent.config import config_from_mapping
from autagent.data.sample import Sample
from autagent.policies.router.table import AnswerTable, designed_subsets
from rewards import RewardConfig

TOOLS = ("asr", "tempo", "pitch")
CHOICES = ("a", "b", "c", "d")


def _one_hot(k: int) -> tuple:
    """Log-probabilities of a reasoner sure of choice ``k`` (finite, so the surrogate can add them)."""
    return tuple(0.0 if j == k else -1000.0 for j in range(len(CHOICES)))


def _table(scores_of) -> AnswerTable:
    rng = np.random.default_rng(0)
    samples = [
        Sample(id=f"q{i}", audio="x.wav", question="?", choices=CHOICES, answer=CHOICES[i % 4]) for i in range(6)
    ]
    table = AnswerTable(samples, TOOLS, ["empty", "singles", "all", "leave_one_out"])
    for s in samples:
        for z in designed_subsets(TOOLS, ["empty", "singles", "all", "leave_one_out"]):
            scores = scores_of(rng)
            table.answers[s.id][z] = (CHOICES[int(np.argmax(scores))], scores)
    return table


@pytest.mark.parametrize("kind", ["differential", "binary"])
@pytest.mark.parametrize("price", [0.0, 0.02])
def test_confidence_equals_the_binary_reward_when_scores_are_one_hot(kind, price):
    table = _table(lambda rng: _one_hot(int(rng.integers(4))))
    ids = sorted(table.samples)
    hard = table.rewards(ids, kind, price, "binary")
    soft = table.rewards(ids, kind, price, "confidence")
    assert hard.shape == (6, 8) and np.allclose(soft, hard, atol=1e-9)
    assert set(np.unique(hard + price * np.array([bin(j).count("1") for j in range(8)]))) <= {-1.0, 0.0, 1.0}


def test_confidence_is_the_probability_of_the_right_choice_subset_minus_without():
    table = _table(lambda rng: tuple(rng.normal(size=4)))
    ids = sorted(table.samples)
    soft = table.rewards(ids, "differential", 0.0, "confidence")
    sample = table.samples["q1"]  # answer "b"
    scores = np.asarray(table.answers["q1"][("asr",)][1])
    base = np.asarray(table.answers["q1"][()][1])
    p = np.exp(scores) / np.exp(scores).sum()
    p0 = np.exp(base) / np.exp(base).sum()
    assert sample.answer == "b"
    assert soft[1, 4] == pytest.approx(p[1] - p0[1])  # every_subset order: (pitch, tempo, asr) bits; 4 = asr alone
    assert not np.allclose(soft, np.round(soft))  # fractional: a denser signal than 0/1
    assert np.all(soft[:, 0] == 0)  # no tool against itself


def test_the_soft_signal_needs_an_answer_table_and_a_known_name():
    with pytest.raises(ValueError, match="reward.signal must be one of"):
        RewardConfig(signal="soft")
    with pytest.raises(Exception, match="reward.signal: confidence reads the answer table"):
        config_from_mapping({"reward": {"signal": "confidence"}}, {}, "test")

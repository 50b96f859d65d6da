"""The GRPO objective: advantage estimators (and how each treats the two rewards), clipping, KL."""
from __future__ import annotations

import pytest
import torch

from autagent.grpo import GRPOConfig, advantages, clipped_surrogate, group_advantages, grpo_loss, kl_to_reference
from rewards import binary_reward, differential_reward

CHOICES = ["yes", "no"]


def _rewards(base_right: list[bool], tool_right: list[list[bool]]):
    """[B, G] differential and binary rewards for queries with the given y_base and ŷ correctness."""
    diff, binary = [], []
    for base, row in zip(base_right, tool_right):
        cols = dict(predictions=["yes" if ok else "no" for ok in row], base_predictions=["yes" if base else "no"] * len(row),
                    answer=["yes"] * len(row), choices=[CHOICES] * len(row))
        diff.append(differential_reward([""] * len(row), [""] * len(row), **cols))
        binary.append(binary_reward([""] * len(row), [""] * len(row), **cols))
    return torch.tensor(diff), torch.tensor(binary)


BASE = [True, False, True, False]
TOOLS = [[True, False, True, True], [True, False, False, True], [True, True, True, True], [False, False, False, False]]


def test_group_advantage_makes_the_two_rewards_identical():
    diff, binary = _rewards(BASE, TOOLS)
    assert not torch.equal(diff, binary)
    assert torch.equal(advantages(diff, "group"), advantages(binary, "group"))


def test_reward_advantage_differs_exactly_where_the_base_answer_is_right():
    diff, binary = _rewards(BASE, TOOLS)
    a_diff, a_bin = advantages(diff, "reward"), advantages(binary, "reward")
    for q, base in enumerate(BASE):
        assert torch.equal(a_diff[q], a_bin[q]) is (not base), q
        if base:  # differential: 0 where the subset keeps the right answer, -1 where it breaks it
            assert torch.equal(a_diff[q], a_bin[q] - 1)
    assert torch.equal(a_diff, diff) and torch.equal(a_bin, binary)


def test_batch_advantage_normalises_over_the_whole_batch():
    diff, binary = _rewards(BASE, TOOLS)
    a = advantages(diff, "batch")
    assert torch.allclose(a.mean(), torch.tensor(0.0), atol=1e-6)
    assert torch.allclose(a.std(unbiased=False), torch.tensor(1.0), atol=1e-3)
    assert not torch.allclose(advantages(diff, "batch"), advantages(binary, "batch"))  # the baseline differs per query
    assert torch.equal(advantages(torch.ones(2, 3), "batch"), torch.zeros(2, 3))


def test_group_advantages_normalise_each_group():
    rewards = torch.tensor([[1.0, 0.0, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv = group_advantages(rewards)
    assert torch.allclose(adv[0].mean(), torch.tensor(0.0), atol=1e-6)
    assert torch.allclose(adv[0].std(unbiased=False), torch.tensor(1.0), atol=1e-3)
    assert adv[0, 0] > 0 > adv[0, 2]
    assert torch.equal(adv[1:], torch.zeros(2, 4))  # zero variance: no signal, no NaN


def test_clipping_limits_the_ratio():
    logp_old = torch.zeros(3)
    logp_new = torch.log(torch.tensor([1.5, 1.0, 0.5]))
    adv = torch.tensor([1.0, 1.0, -1.0])
    surrogate = clipped_surrogate(logp_new, logp_old, adv, clip_epsilon=0.2)
    assert torch.allclose(surrogate, torch.tensor([1.2, 1.0, -0.8]))


def test_kl_is_zero_at_reference_and_positive_elsewhere():
    logp = torch.log(torch.tensor([0.2, 0.5]))
    assert torch.allclose(kl_to_reference(logp, logp), torch.zeros(2))
    assert (kl_to_reference(logp, logp + 0.3) > 0).all()


def test_loss_gradient_raises_probability_of_positive_advantage():
    theta = torch.zeros(2, requires_grad=True)
    logp = torch.log_softmax(theta, 0)
    loss, stats = grpo_loss(logp, logp.detach(), logp.detach(), torch.tensor([1.0, -1.0]), 0.2, 0.04)
    loss.backward()
    assert theta.grad[0] < 0 < theta.grad[1]  # descent raises action 0
    assert stats["kl"] == 0.0


@pytest.mark.parametrize("field, value, message", [("group_size", 1, "group_size"), ("advantage", "mean", "grpo.advantage"),
                                                    ("loss_type", "ppo", "grpo.loss_type"), ("inner_epochs", 0, "inner_epochs"),
                                                    ("temperature", 0.0, "temperature")])
def test_config_is_validated(field, value, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**{field: value})

"""The GRPO objective: advantage estimators (and how each treats the two rewards), clipping, KL."""

from __future__ import annotations

import pytest
import torch

from autagent.policies.grpo import (
    GRPOConfig,
    advantages,
    clipped_surrogate,
    group_advantages,
    grpo_loss,
    kl_to_reference,
)
from autagent.policies.lm.config import LMPolicyConfig
from autagent.policies.router.config import RouterGRPOConfig
from rewards import binary_reward, differential_reward

CHOICES = ["yes", "no"]


def _rewards(base_right: list[bool], tool_right: list[list[bool]]):
    """[B, G] differential and binary rewards for queries with the given y_base and ŷ correctness."""
    diff, binary = [], []
    for base, row in zip(base_right, tool_right):
        cols = dict(
            predictions=["yes" if ok else "no" for ok in row],
            base_predictions=["yes" if base else "no"] * len(row),
            answer=["yes"] * len(row),
            choices=[CHOICES] * len(row),
        )
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


def test_centered_advantage_keeps_a_price_only_difference_at_the_prices_size():
    """A group whose replies answer alike and differ only by the tool price (one reply calls no tool, five call
    one at 0.05): ``centered`` keeps that 0.05 at its size beside a group where a tool fixes the answer, where
    ``group`` makes both full-size (the text LM policy learned to call nothing under it, issue 65)."""
    rewards = torch.tensor([[0.0, -0.05, -0.05, -0.05, -0.05, -0.05], [-0.05, 0.95, -0.05, -0.05, -0.05, -0.05]])
    centered = advantages(rewards, "centered")
    assert torch.allclose(centered, rewards - rewards.mean(dim=1, keepdim=True), atol=0, rtol=0)
    assert torch.allclose(centered[0, 0], torch.tensor(0.05 * 5 / 6)) and torch.allclose(
        centered[1, 1], torch.tensor(5 / 6)
    )
    group = advantages(rewards, "group")
    assert torch.allclose(group[0, 0], group[1, 1], atol=0.02)  # the price alone as large as a fixed answer (2.2)
    diff, binary = _rewards(BASE, TOOLS)
    assert torch.allclose(advantages(diff, "centered"), advantages(binary, "centered"), atol=1e-7)
    assert GRPOConfig(advantage="centered").advantage == "centered"


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


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("group_size", 1, "group_size"),
        ("advantage", "mean", "grpo.advantage"),
        ("inner_epochs", 0, "inner_epochs"),
        ("temperature", 0.0, "temperature"),
    ],
)
def test_config_is_validated(field, value, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**{field: value})


def test_the_defaults_are_the_papers_and_every_bound_is_checked():
    defaults = GRPOConfig()
    assert (defaults.group_size, defaults.temperature, defaults.clip_epsilon, defaults.beta) == (6, 1.0, 0.2, 0.04)
    assert (defaults.advantage, defaults.inner_epochs, defaults.max_grad_norm) == ("reward", 2, 1.0)
    assert (defaults.batch_size, defaults.steps, defaults.weight_decay) == (16, 150, 0.0)
    assert defaults.advantage_epsilon == 1e-4
    GRPOConfig(group_size=2, steps=0, batch_size=1, inner_epochs=1, beta=0.0)  # the smallest allowed
    for bad in (
        {"group_size": 1},
        {"temperature": 0.0},
        {"batch_size": 0},
        {"steps": -1},
        {"inner_epochs": 0},
        {"clip_epsilon": 0.0},
        {"beta": -0.01},
        {"advantage": "mean"},
    ):
        with pytest.raises(ValueError, match="grpo."):
            GRPOConfig(**bad)
    trainer = RouterGRPOConfig()  # the router trainer's own fields, on top of the shared ones
    defaults = (trainer.learning_rate, trainer.credit, trainer.objective, trainer.entropy_coef)
    assert defaults == (3e-3, "subset", "sampled", 0)
    for bad in ({"objective": "exact"}, {"learning_rate": 0.0}, {"credit": "each"}, {"entropy_coef": -1.0}):
        with pytest.raises(ValueError, match="policy.router."):
            RouterGRPOConfig(**bad)
    assert LMPolicyConfig().loss_type == "grpo"
    with pytest.raises(ValueError, match="policy.lm.loss_type"):
        LMPolicyConfig(loss_type="ppo")


def test_advantages_exactly():
    """Eq. 2 and the batch estimator to the last bit, epsilon included."""
    group = group_advantages(torch.tensor([[1.0, 0.0]]))
    assert torch.allclose(group, torch.tensor([[0.5, -0.5]]) / (0.5 + 1e-4), atol=1e-7, rtol=0)
    batch = advantages(torch.tensor([[1.0, 0.0], [0.0, 0.0]]), "batch")
    std = torch.tensor([1.0, 0.0, 0.0, 0.0]).std(unbiased=False)
    assert torch.allclose(batch, (torch.tensor([[1.0, 0.0], [0.0, 0.0]]) - 0.25) / (std + 1e-4), atol=1e-7, rtol=0)
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        advantages(torch.zeros(1, 2), "mean")


def test_the_surrogate_kl_and_loss_exactly():
    """Eq. 4 with ratios on both sides of the clip, the k3 KL, and the loss with and without a token mask
    (the per-sequence mean: TRL's ``grpo``)."""
    logp_old = torch.log(torch.tensor([0.2, 0.2, 0.2, 0.2]))
    ratio = torch.tensor([1.5, 0.5, 1.5, 0.5])
    logp_new = logp_old + torch.log(ratio)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    surrogate = clipped_surrogate(logp_new, logp_old, adv, 0.2)
    assert torch.allclose(surrogate, torch.tensor([1.2, 0.5, -1.5, -0.8]), atol=1e-6)
    logp_ref = logp_new - 0.3
    kl = kl_to_reference(logp_new, logp_ref)
    assert torch.allclose(kl, torch.full((4,), float(torch.exp(torch.tensor(-0.3)) + 0.3 - 1)), atol=1e-6)
    loss, stats = grpo_loss(logp_new, logp_old, logp_ref, adv, 0.2, 0.5)
    assert torch.allclose(loss, -(surrogate - 0.5 * kl).mean(), atol=1e-6) and stats["clip_fraction"] == 1.0
    tokens_new, tokens_old = logp_new.view(2, 2), logp_old.view(2, 2)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # the second completion has one token
    masked, _ = grpo_loss(tokens_new, tokens_old, logp_ref.view(2, 2), adv.view(2, 2), 0.2, 0.5, mask=mask)
    per_token = -(surrogate - 0.5 * kl).view(2, 2)
    assert torch.allclose(masked, (per_token[0].mean() + per_token[1, 0]) / 2, atol=1e-6)
    _, partly = grpo_loss(logp_old + torch.log(torch.tensor([1.1, 1.3, 1.0, 0.7])), logp_old, logp_old, adv, 0.2, 0.0)
    assert partly["clip_fraction"] == 0.5  # 1.3 and 0.7 are outside [0.8, 1.2]; 1.1 and 1.0 inside


def test_the_edges_the_exact_tests_leave_open():
    """Advantages other than ±1 (a product, not a quotient), a batch whose std is exactly 1 (the
    zero-variance guard is ``std == 0``, epsilon still divides), a completion with no token (no NaN), and
    a ratio sitting on the clip bound (not clipped)."""
    ratio = torch.tensor([1.5, 0.5])
    surrogate = clipped_surrogate(torch.log(ratio), torch.zeros(2), torch.tensor([2.0, -0.5]), 0.2)
    assert torch.allclose(surrogate, torch.tensor([2.4, -0.4]), atol=1e-6)  # min(3.0, 2.4), min(-0.25, -0.4)
    batch = advantages(torch.tensor([[0.0, 2.0]]), "batch")
    assert torch.allclose(batch, torch.tensor([[-1.0, 1.0]]) / (1.0 + 1e-4), atol=1e-7, rtol=0)
    logp = torch.log(torch.full((2, 2), 0.5))
    adv = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    loss, stats = grpo_loss(logp, logp, logp, adv, 0.0, 0.1, mask=torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    assert torch.isfinite(loss) and torch.allclose(loss, torch.tensor(-0.5))  # (−1 + 0) / 2 completions
    assert stats["clip_fraction"] == 0.0  # ratio 1 with clip 0: on the bound, not past it

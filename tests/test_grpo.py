"""The GRPO objective: advantages (zero-variance groups included), clipping and the KL term."""
from __future__ import annotations

import torch

from autagent.grpo import GRPOConfig, clipped_surrogate, group_advantages, grpo_loss, kl_to_reference


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


def test_config_validates_group_size():
    import pytest

    with pytest.raises(ValueError, match="group_size"):
        GRPOConfig(group_size=1)

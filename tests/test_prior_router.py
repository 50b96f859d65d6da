"""The ``prior`` scorer: a per-kind prior from the question that the clip can override, within a bound.
It starts as the question's lookup (the other inputs change nothing until trained), its override never
moves a logit further than ``override_limit``, and trained on a kind whose right tool depends on the clip
it learns the exception a question-only router cannot."""

from __future__ import annotations

import pytest
import torch

from autagent.policies.router.exact import expected_loss, subset_matrix
from autagent.policies.router.model import Router, RouterConfig

COLUMNS = {"question": (0, 8), "audio": (8, 16)}


def _router(**kw) -> Router:
    torch.manual_seed(0)
    return Router(16, RouterConfig(scorer="prior", inputs=["question", "audio"], **kw), 3, columns=COLUMNS)


def test_it_starts_as_the_questions_prior():
    router = _router()
    x = torch.randn(5, 16)
    y = x.clone()
    y[:, 8:] = torch.randn(5, 8) * 10  # another clip
    assert torch.allclose(router.logits(x), router.logits(y))
    z = x.clone()
    z[:, :8] = torch.randn(5, 8)  # another question
    assert not torch.allclose(router.logits(x), router.logits(z))


def test_the_override_is_bounded():
    router = _router(override_limit=1.5)
    x = torch.randn(4, 16)
    prior = router.logits(x)
    with torch.no_grad():
        router.net.override[-1].bias.fill_(100.0)
    assert torch.all(router.logits(x) - prior <= 1.5 + 1e-5) and torch.all(router.logits(x) - prior > 1.4)


def test_it_learns_an_exception_the_clip_decides_where_the_question_alone_cannot():
    """One kind (the same question), tool 0 right on clips of one sort, tool 1 on the other."""
    torch.manual_seed(1)
    n = 64
    question = torch.randn(1, 8).expand(n, 8)
    sort = torch.arange(n) % 2
    audio = torch.randn(n, 8) * 0.1 + (sort.float() * 2 - 1).unsqueeze(1)
    x = torch.cat([question, audio], dim=1)
    subsets = subset_matrix(3)
    right_tool = torch.where(sort == 0, 0, 1)
    rewards = subsets[:, right_tool].T - 0.3 * subsets.sum(1)  # [n, 8]: the right tool, each call costs 0.3

    def train(router):
        optim = torch.optim.Adam(router.parameters(), lr=0.01)
        for _ in range(300):
            loss, _ = expected_loss(router.logits(x), router.logits(x).detach(), rewards, subsets, 0.0)
            optim.zero_grad()
            loss.backward()
            optim.step()
        return router.select(x)

    chosen = train(_router())
    assert torch.equal(chosen[sort == 0][:, :2], torch.tensor([[1.0, 0.0]]).expand(n // 2, 2))
    assert torch.equal(chosen[sort == 1][:, :2], torch.tensor([[0.0, 1.0]]).expand(n // 2, 2))
    alone = train_question_only(x[:, :8], rewards, subsets)
    assert len({tuple(row.tolist()) for row in alone}) == 1  # one kind, one answer: it cannot split the clips


def train_question_only(q, rewards, subsets):
    torch.manual_seed(0)
    router = Router(8, RouterConfig(inputs=["question"]), 3)
    optim = torch.optim.Adam(router.parameters(), lr=0.01)
    for _ in range(300):
        loss, _ = expected_loss(router.logits(q), router.logits(q).detach(), rewards, subsets, 0.0)
        optim.zero_grad()
        loss.backward()
        optim.step()
    return router.select(q)


def test_a_prior_needs_the_question_and_another_input():
    with pytest.raises(ValueError, match="scorer prior needs the question"):
        RouterConfig(scorer="prior", inputs=["audio"])
    with pytest.raises(ValueError, match="scorer prior needs the question"):
        RouterConfig(scorer="prior", inputs=["question"])

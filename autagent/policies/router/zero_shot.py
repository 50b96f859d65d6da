"""Tools a plugin never trained with, scored from their descriptions alone: the zero-shot head.

A router's outputs are the tools it trained with; for a tool added later the plugin has nothing but
the tool's description.  The head scores a (query, tool) pair by how *unusually* close the query's
text is to that description, which is what a description can say without training:

* for each text input k the router reads (the question, the choices' mean), the cosine between its
  MiniLM embedding and the description's, standardised by that cosine's mean and spread over the
  training queries: z_k(x, t) = (cos(x_k, e_t) − μ_k·e_t) / sqrt(e_tᵀ Σ_k e_t), with μ_k, Σ_k the
  mean and covariance of the training queries' unit embeddings (so a description near every question,
  or near none, is judged against its own usual value, and a new tool's is computed exactly);
* its margin over the best other tool of the library, z_k(x, t) − max_{j≠t} z_k(x, j).

A logistic model over those numbers, p = σ(w·s(x, t) + b), is fitted after GRPO to reproduce the
trained router's own selections over the tools it learned, its threshold moved to the one that best
reproduces them on the dev queries (F1), so a new tool is called where the router calls a learned tool
whose description matches as well.  No weight belongs to a tool: a new tool needs its description and
nothing else.  An input the router set aside (a blanked row, all zeros) contributes zeros.

The head is not used for the tools the router learned; it travels in the plugin as
``zero_shot.safetensors`` (the two means and covariances: 1.2 MB at 384 dimensions).
"""

from __future__ import annotations

import torch
from torch import nn

TEXT_INPUTS = ("question", "choices")
RIDGE = 1e-6
"""Added to every standardising variance: a description orthogonal to all training queries' spread
would otherwise divide by zero."""
L2 = 1e-2
"""The logistic fit's penalty on its weights (the signals are z-scores, of order one)."""


class DescriptionHead(nn.Module):
    """``columns`` (input -> feature columns, :attr:`Featurizer.columns`) and the text embedding width."""

    def __init__(self, columns: dict, text_dim: int):
        super().__init__()
        self.inputs = [name for name in TEXT_INPUTS if name in columns]
        if not self.inputs:
            raise ValueError(f"the zero-shot head reads the question or the choices; the router reads {list(columns)}")
        self.starts = {name: columns[name][0] for name in self.inputs}
        self.text_dim = text_dim
        for name in self.inputs:
            self.register_buffer(f"{name}_mean", torch.zeros(text_dim))
            self.register_buffer(f"{name}_cov", torch.eye(text_dim))
        self.register_buffer("weight", torch.zeros(2 * len(self.inputs)))
        self.register_buffer("bias", torch.tensor(-30.0))  # unfitted: calls nothing
        self._prepared: tuple | None = None
        """(descriptions, their standardisers) kept by :meth:`prepare` for a plugin's fixed tool set."""

    def prepare(self, descriptions: torch.Tensor) -> None:
        """Compute each description's mean and spread once: a plugin's tools are fixed while it selects,
        so a query then costs a cosine per (input, tool)."""
        self._prepared = (descriptions, self._standardisers(descriptions.float()))

    def _standardisers(self, descriptions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per text input, ``[T]`` the mean and the spread of each description's cosine over the training queries."""
        out = []
        for name in self.inputs:
            var = torch.einsum("td,de,te->t", descriptions, getattr(self, f"{name}_cov"), descriptions)
            out.append((getattr(self, f"{name}_mean") @ descriptions.T, (var + RIDGE).sqrt()))
        return out

    def _unit(self, features: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, dim]`` unit embeddings of input ``name`` and ``[B]`` whether the row holds one (not blanked)."""
        start = self.starts[name]
        x = features[:, start : start + self.text_dim].float()
        return nn.functional.normalize(x, dim=-1), x.abs().sum(-1) > 0

    def signals(self, features: torch.Tensor, descriptions: torch.Tensor) -> torch.Tensor:
        """``[B, T, 2K]``: each text input's standardised similarity to each tool's description, then each
        one's margin over the best other tool (K text inputs, T tools)."""
        prepared = self._prepared is not None and self._prepared[0] is descriptions
        descriptions = descriptions.float()
        standardisers = self._prepared[1] if prepared else self._standardisers(descriptions)
        zs = []
        for name, (mean, spread) in zip(self.inputs, standardisers):
            unit, present = self._unit(features, name)
            z = (unit @ descriptions.T - mean) / spread
            zs.append(torch.where(present.unsqueeze(-1), z, torch.zeros_like(z)))
        z = torch.stack(zs, dim=-1)  # [B, T, K]
        return torch.cat([z, z - best_of_the_others(z)], dim=-1)

    def logits(self, features: torch.Tensor, descriptions: torch.Tensor) -> torch.Tensor:
        """``[B, T]``: a logit per (query, tool); the head calls a tool where it is above zero."""
        return self.signals(features, descriptions) @ self.weight + self.bias

    @torch.no_grad()
    def fit(
        self,
        features: torch.Tensor,
        descriptions: torch.Tensor,
        selections: torch.Tensor,
        dev: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> dict:
        """Fit the standardisers on the training queries' ``features``, the logistic model on the router's
        0/1 ``selections [N, T]`` of the learned tools, and the threshold on ``dev`` (features and the
        router's selections there; without it, the training queries').  Returns what it fitted."""
        self._prepared = None
        for name in self.inputs:
            unit, present = self._unit(features, name)
            rows = unit[present].double()
            if len(rows) >= 2:
                getattr(self, f"{name}_mean").copy_(rows.mean(0).float())
                getattr(self, f"{name}_cov").copy_(torch.cov(rows.T).float())
        x, y = self._flat(features, selections, descriptions)
        if y.sum() == 0 or y.sum() == len(y):  # nothing to imitate: the head keeps calling nothing
            return {"fitted": False, "reason": "the router calls every tool or none on the training queries"}
        w = torch.zeros(x.shape[1] + 1, dtype=torch.float64)
        with torch.enable_grad():
            w.requires_grad_(True)
            optimiser = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")

            def loss():
                optimiser.zero_grad()
                value = nn.functional.binary_cross_entropy_with_logits(x @ w[:-1] + w[-1], y) + L2 * w[:-1].pow(2).sum()
                value.backward()
                return value

            optimiser.step(loss)
        w = w.detach()
        tune_x, tune_y = (x, y) if dev is None else self._flat(*dev, descriptions)
        threshold, f1 = best_threshold(tune_x @ w[:-1] + w[-1], tune_y)
        self.weight.copy_(w[:-1].float())
        self.bias.copy_((w[-1] - threshold).float())
        return {
            "fitted": True,
            "weight": [round(float(v), 4) for v in self.weight],
            "bias": round(float(self.bias), 4),
            "threshold": round(float(threshold), 4),
            "f1_against_the_router": round(f1, 4),
        }

    def _flat(self, features: torch.Tensor, selections: torch.Tensor, descriptions: torch.Tensor):
        """One row per (query, tool): ``[N·T, 2K]`` signals and ``[N·T]`` the router's 0/1 selections."""
        signals = self.signals(features, descriptions).reshape(-1, self.weight.numel())
        return signals.double(), selections.reshape(-1).double()


def best_of_the_others(z: torch.Tensor) -> torch.Tensor:
    """``z [B, T, K]`` -> for each tool the largest value among the *other* tools (0 with one tool)."""
    if z.shape[1] < 2:
        return torch.zeros_like(z)
    top2 = z.topk(2, dim=1)
    first, second = top2.values[:, :1], top2.values[:, 1:2]
    is_top = torch.arange(z.shape[1]).view(1, -1, 1) == top2.indices[:, :1]
    return torch.where(is_top, second, first)


def best_threshold(scores: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    """The score cut (call above it) with the highest F1 against the 0/1 ``labels``, and that F1."""
    order = torch.argsort(scores, descending=True)
    hits = labels[order].cumsum(0)
    calls = torch.arange(1, len(scores) + 1, dtype=torch.float64)
    f1 = 2 * hits / (calls + labels.sum())
    k = int(torch.argmax(f1))
    sorted_scores = scores[order]
    below = sorted_scores[k + 1] if k + 1 < len(scores) else sorted_scores[k] - 1.0
    return float((sorted_scores[k] + below) / 2), float(f1[k])

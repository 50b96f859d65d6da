"""The router as a plugin: ``model.safetensors`` plus the encoders it expects, in the shared format."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tools import get_tool

from ...manifest import export_plugin
from ...trust import PluginError
from .ensemble import build
from .features import Featurizer
from .model import RouterConfig, subset_ids
from .zero_shot import DescriptionHead

HEAD_FILE = "zero_shot.safetensors"


def export_router(
    directory: str | Path,
    router,
    featurizer,
    tool_ids,
    tools_profile: str,
    tool_settings: dict | None,
    max_seconds: float | None,
    training_config: dict,
    metrics: dict | None = None,
    head: DescriptionHead | None = None,
) -> Path:
    """A router plugin: ``model.safetensors``, the encoders it expects, the descriptions of the tools it
    trained with and, with ``head``, ``zero_shot.safetensors``, which scores tools added later from
    their descriptions (so does a ``tool_conditioned`` router's own scorer)."""

    def write(tmp: Path) -> None:
        save_file({k: v.contiguous() for k, v in router.state_dict().items()}, tmp / "model.safetensors")
        if head is not None:
            save_file({k: v.contiguous() for k, v in head.state_dict().items()}, tmp / HEAD_FILE)

    return export_plugin(
        directory,
        "router",
        write,
        tool_ids,
        tools_profile,
        tool_settings,
        max_seconds,
        {
            "encoders": featurizer.describe(),
            "input_dim": featurizer.dim,
            "policy_config": dataclasses.asdict(router.config),
            "descriptions": {t: get_tool(t).description for t in tool_ids},
            "scores_new_tools": head is not None or router.config.scorer == "tool_conditioned",
            "new_tools": "head"
            if head is not None and router.config.new_tools == "head"
            else ("scorer" if router.config.scorer == "tool_conditioned" else None),
            "training_config": training_config,
            "metrics": metrics or {},
        },
    )


def check_encoders(manifest: dict) -> None:
    """The text and audio encoders installed here must be the very ones the plugin was trained on."""
    from ...encoders import AudioEncoder, text_encoder

    wanted = manifest.get("encoders") or {}
    here = {"text": text_encoder(None).describe(), "audio": AudioEncoder.describe() if wanted.get("audio") else None}
    for kind in ("text", "audio"):
        theirs, ours = wanted.get(kind), here[kind]
        if theirs != ours:
            raise PluginError(f"plugin's {kind} encoder {theirs!r} is not the one installed here {ours!r}")


class RouterPlugin:
    """A loaded router plugin: ``select(audio, question, choices) -> [tool ids]`` for any reasoner.

    ``extra_tools`` are registered tools the plugin never trained with (``zero_shot_tools``), scored from
    their descriptions by the plugin's zero-shot head, or by a ``tool_conditioned`` router's own scorer
    (``new_tools: scorer``, and plugins exported before the head); the learned tools' selection is the
    router's, whatever is added."""

    def __init__(self, directory: Path, manifest: dict, extra_tools=()):
        self.directory, self.manifest = directory, manifest
        config = dict(manifest["policy_config"], text_model=None)  # the installed encoder, checked above
        config = RouterConfig(**config)
        self.featurizer = Featurizer(config)
        if self.featurizer.dim != manifest["input_dim"]:
            raise PluginError(
                f"{directory}: encoders give {self.featurizer.dim}-dim features, plugin expects {manifest['input_dim']}"
            )
        self.learned_tools = [t["id"] for t in manifest["tools"]]
        self.zero_shot_tools = [t for t in extra_tools if t not in self.learned_tools]
        has_head = (directory / HEAD_FILE).is_file()
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
        self.router = build(self.featurizer.dim, config, len(self.learned_tools), descriptions, self.featurizer.columns)
        try:
            self.router.load_state_dict(load_file(directory / "model.safetensors"))
        except (RuntimeError, KeyError, OSError) as err:
            raise PluginError(f"{directory}: model.safetensors does not fit the declared router ({err})") from err
        self.head, self.descriptions = None, descriptions
        if self.zero_shot_tools:
            new = self.featurizer.tool_descriptions([get_tool(t).description for t in self.zero_shot_tools])
            self.descriptions = torch.cat([descriptions, new])
            if by_head:
                self.head = DescriptionHead(self.featurizer.columns, descriptions.shape[1])
                try:
                    self.head.load_state_dict(load_file(directory / HEAD_FILE))
                except (RuntimeError, KeyError, OSError) as err:
                    raise PluginError(f"{directory}: {HEAD_FILE} does not fit the declared router ({err})") from err
                self.head.prepare(self.descriptions)
            else:
                self.router.set_tools(self.descriptions, [*range(len(descriptions)), *[None] * len(new)])
        self.router.eval()

    @property
    def tools(self) -> list[str]:
        """Every tool this plugin scores: the learned ones, then those added zero-shot."""
        return self.learned_tools + self.zero_shot_tools

    def select_many(self, samples) -> list[tuple[str, ...]]:
        chosen = select_with_head(self.router, self.head, self.featurizer.of_samples(samples), self.descriptions)
        return [subset_ids(row, self.tools) for row in chosen]

    def select(self, audio: str, question: str, choices=()) -> list[str]:
        from ...data.sample import Sample

        query = Sample(id="query", audio=str(audio), question=question, choices=tuple(choices), answer="")
        return list(self.select_many([query])[0])

    def probabilities(self, audio: str, question: str, choices=()) -> dict[str, float]:
        features = self.featurizer([question], [str(audio)], [tuple(choices)])
        probs = self.router.tool_probabilities(features)
        if self.head is not None:
            added = added_logits(self.head, features, self.descriptions, len(self.learned_tools))
            probs = torch.cat([probs, torch.sigmoid(added)], dim=1)
        return {t: round(float(p), 4) for t, p in zip(self.tools, probs[0])}


def select_with_head(router, head: DescriptionHead | None, features: torch.Tensor, descriptions: torch.Tensor):
    """``[B, T]`` 0/1 selections: the router's of the tools it learned, then the head's of the tools added
    after them (``descriptions``: every tool's, the learned first); the router's alone without a head."""
    chosen = router.select(features)
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

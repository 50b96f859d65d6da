"""A router plugin made in memory and written once.

A training run builds its plugin as a :class:`RouterDraft` (the manifest without its files and hash, and
the tensors of each safetensors file), fits the back-off onto it, certifies and evaluates what
:meth:`RouterDraft.open` gives (the very plugin a load of the written folder gives), and writes the folder
once with its model card (:func:`autagent.plugin.manifest.write_plugin`): one content hash per run, the
one its metrics.json records.  :func:`export_router` writes a draft at once (tests, benchmarks).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from tools import get_tool

from ...plugin.manifest import PluginTarget, manifest_head, write_plugin
from .backoff import Backoff
from .features import Featurizer
from .plugin import BACKOFF_FILE, HEAD_FILE, RouterPlugin, Weights
from .zero_shot import DescriptionHead


@dataclass
class RouterParts:
    """What a router plugin holds beyond its run's :class:`PluginTarget`."""

    router: object
    """The trained router (a :class:`Router` or a :class:`RouterEnsemble`)."""
    featurizer: Featurizer
    """The encoders it reads (recorded with their weight digests)."""
    head: DescriptionHead | None = None
    """The zero-shot head (``zero_shot.safetensors``), which scores tools added after training."""
    tool_seconds: dict | None = None
    """Each tool's measured seconds per clip on the exporting machine (the dial's latency budget reads them)."""
    tool_values: dict | None = None
    """Each tool's average gain alone over no tool on the training queries (an eval's cost curve's fixed order)."""
    values_source: str | None = None
    """Where ``tool_values`` came from (the answer table, or the reasoner asked)."""
    backoff: tuple | None = None
    """A fitted :class:`Backoff` and its summary (a warm start's, which travels unchanged)."""


def tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A module's state as a safetensors file holds it (a copy: later changes to the module stay out)."""
    return {k: v.detach().clone().contiguous() for k, v in module.state_dict().items()}


def backoff_entry(backoff: Backoff, summary: dict) -> dict:
    """The manifest's ``backoff``: its settings and what its fit measured, as JSON."""
    return json.loads(json.dumps({"config": dataclasses.asdict(backoff.config), **summary}))


@dataclass
class RouterDraft:
    """A router plugin not yet written: its manifest without files and hash, and each weights file's tensors."""

    directory: Path
    """Where :meth:`write` puts it."""
    manifest: dict
    """The manifest as it will be written, less ``files`` and ``content_hash``."""
    weights: dict[str, dict[str, torch.Tensor]]
    """File name -> the tensors it will hold."""

    def attach_backoff(self, backoff: Backoff, summary: dict) -> None:
        """The back-off (``backoff.safetensors``) and its settings and fit (``summary``) in the manifest."""
        self.weights[BACKOFF_FILE] = tensors(backoff)
        self.manifest["backoff"] = backoff_entry(backoff, summary)

    def open(self, extra_tools=()) -> RouterPlugin:
        """The plugin as loading the written folder gives it (the same class, weights and manifest; its
        tools and encoders are this machine's, as they were when it was made)."""
        return RouterPlugin(self.directory, self.manifest, tuple(extra_tools), Weights(self.directory, self.weights))

    def write(self, evaluation: dict | None = None) -> dict:
        """The plugin folder, written once with its model card (the run's ``evaluation`` table when there is
        one); returns the manifest written (its ``content_hash`` the run's)."""

        def save(tmp: Path) -> None:
            for name, held in self.weights.items():
                save_file(held, tmp / name)

        return write_plugin(self.directory, self.manifest, save, evaluation)


def draft_router(target: PluginTarget, parts: RouterParts) -> RouterDraft:
    """A router plugin in memory: ``model.safetensors``, the encoders it expects, the descriptions of the
    tools it trained with and, with a head, ``zero_shot.safetensors``, which scores tools added later from
    their descriptions (so does a ``tool_conditioned`` router's own scorer)."""
    router, head, featurizer = parts.router, parts.head, parts.featurizer
    weights = {"model.safetensors": tensors(router)}
    if head is not None:
        weights[HEAD_FILE] = tensors(head)
    if parts.backoff is not None:
        weights[BACKOFF_FILE] = tensors(parts.backoff[0])
    new_tools = "scorer" if router.config.scorer == "tool_conditioned" else None
    fields = {
        "encoders": featurizer.describe(),
        "input_dim": featurizer.dim,
        "policy_config": dataclasses.asdict(router.config),
        "descriptions": {t: get_tool(t).description for t in target.tool_ids},
        "scores_new_tools": head is not None or router.config.scorer == "tool_conditioned",
        "new_tools": "head" if head is not None and router.config.new_tools == "head" else new_tools,
        "training_config": target.training_config,
        "metrics": target.metrics or {},
        **({"tool_seconds": parts.tool_seconds} if parts.tool_seconds else {}),
        **({"tool_values": parts.tool_values, "tool_values_source": parts.values_source} if parts.tool_values else {}),
        **({"backoff": backoff_entry(*parts.backoff)} if parts.backoff is not None else {}),
    }
    return RouterDraft(Path(target.directory), manifest_head("router", target, fields), weights)


def export_router(target: PluginTarget, parts: RouterParts) -> Path:
    """A router plugin written at once (:func:`draft_router`, then :meth:`RouterDraft.write`)."""
    draft = draft_router(target, parts)
    draft.write()
    return draft.directory

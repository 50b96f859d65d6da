"""A warm start (``policy.init_from``): training begins from a router plugin instead of random weights.

The plugin's routers are the starting policy *and* GRPO's reference, so the KL term keeps what the
plugin knew and training moves it only where the new reasoner's answers pay for it.  The plugin's
encoders, familiarity banks, zero-shot head and back-off travel unchanged into the new plugin: they read
the text and the clip, not the reasoner.  A run that trains zero steps therefore exports a plugin that
selects exactly as its source does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from safetensors.torch import load_file

from ...plugin.manifest import read_manifest
from ...plugin.trust import PluginError
from .backoff import Backoff
from .ensemble import RouterEnsemble
from .features import Featurizer
from .model import Router, RouterConfig
from .plugin import HEAD_FILE, RouterPlugin, check_encoders
from .zero_shot import DescriptionHead


@dataclass
class WarmStart:
    directory: Path
    manifest: dict
    config: RouterConfig
    members: list[Router]
    featurizer: Featurizer
    head: DescriptionHead | None
    backoff: Backoff | None

    def member(self, index: int) -> Router:
        """A trainable copy of the source's ``index``-th router."""
        router = copy.deepcopy(self.members[index])
        router.train()
        return router


def load_warm_start(directory: str | Path, tool_ids) -> WarmStart:
    """The router plugin at ``directory``, checked (integrity, encoders, tools) and ready to train from."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest.get("policy") != "router":
        raise PluginError(
            f"{directory}: policy.init_from needs a router plugin, this one is {manifest.get('policy')!r}"
        )
    check_encoders(manifest)
    plugin = RouterPlugin(directory, manifest)
    if tuple(plugin.learned_tools) != tuple(tool_ids):
        raise PluginError(
            f"{directory}: the plugin learned the tools {plugin.learned_tools}, the run enables {list(tool_ids)}: "
            "set tools.enabled to the plugin's tools, in its order"
        )
    router = plugin.router
    members = list(router.members) if isinstance(router, RouterEnsemble) else [router]
    head = None
    if (directory / HEAD_FILE).is_file():
        head = DescriptionHead(plugin.featurizer.columns, plugin.descriptions.shape[1])
        head.load_state_dict(load_file(directory / HEAD_FILE))
    backoff = plugin.backoff[0] if plugin.backoff is not None else None
    return WarmStart(directory, manifest, members[0].config, members, plugin.featurizer, head, backoff)

"""Fitting a router plugin's back-off after training (:mod:`.backoff`).

Nothing is retrained: from the plugin, its training and dev queries (the familiarity banks and cuts of
the question and the choices) and phrasings written for calibration and held out of everything else
(the offset of the zero-shot head's vote), a ``backoff.safetensors`` is added to the plugin and its
manifest re-hashed.  ``make train`` does it when ``policy.router.backoff`` is set;
``autagent plugin backoff SRC --out DST`` does it to a copy of an existing plugin.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from ...data.labelled import load_labelled
from ...plugin.manifest import check_tools, read_manifest
from ...plugin.trust import PluginError, file_digest
from .backoff import Backoff, BackoffConfig
from .plugin import RouterPlugin, attach_backoff, check_encoders


def fit_backoff(plugin_dir: str | Path, train, dev, config: BackoffConfig | dict) -> dict:
    """Fit and attach the back-off to the router plugin in ``plugin_dir`` (in place) from the ``train``
    and ``dev`` samples it trained with and ``config.calibration``; returns what it fitted."""
    config = config if isinstance(config, BackoffConfig) else BackoffConfig(**config)
    plugin = open_router(plugin_dir)
    featurizer, descriptions = plugin.featurizer, plugin.descriptions
    backoff = Backoff(featurizer.columns, descriptions.shape[1], config)
    cuts = backoff.fit_familiarity(
        featurizer.of_samples(train, audio=False), featurizer.of_samples(dev, audio=False) if dev else None
    )
    items = load_labelled(config.calibration, config.audio_dir)
    if not items:
        raise ValueError(f"{config.calibration}: no calibration items")
    parts = backoff.decide(
        plugin.router, plugin.zero_shot_head(), featurizer.of_samples([i.sample for i in items]), descriptions
    )
    tools = plugin.learned_tools
    labels = torch.tensor([[float(t in item.tools) for t in tools] for item in items])
    counted = torch.tensor([t not in config.optional for t in tools])
    calibrated = backoff.calibrate(parts, labels, counted)
    summary = {
        "cuts": cuts,
        "offset": calibrated["offset"],
        "calibration_file": {
            "path": str(config.calibration),
            "sha256": file_digest(Path(config.calibration))[0],
            "items": len(items),
            "unfamiliar_share": round(float(parts.unfamiliar.float().mean()), 4),
        },
        "at_offset": calibrated["calibration"],
        "curve": calibrated["curve"],
    }
    summary["content_hash"] = attach_backoff(plugin_dir, backoff, summary)
    return summary


def backoff_copy(source: str | Path, out: str | Path, train, dev, config: BackoffConfig | dict) -> dict:
    """Copy the plugin ``source`` to ``out`` (which must not exist) and fit the back-off onto the copy."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} already exists: name a new folder for the plugin with a back-off")
    open_router(source)  # refuse a bad plugin before copying it
    shutil.copytree(source, out)
    try:
        return fit_backoff(out, train, dev, config)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # no half-made plugin is left behind
        raise


def open_router(directory: str | Path) -> RouterPlugin:
    """The router plugin in ``directory``, checked as :func:`autagent.api.load` checks any plugin (its
    hashes and signature, its tools installed here, the encoders it trained on); that loader stands
    above the policies, this one in the router's own room."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest.get("policy") != "router":
        raise PluginError(f"{directory}: a back-off is for router plugins, this one is {manifest.get('policy')!r}")
    try:
        check_tools(manifest)
        check_encoders(manifest)
        return RouterPlugin(directory, manifest)
    except (KeyError, TypeError, ValueError) as err:  # a signed-off manifest whose fields have the wrong shape
        raise PluginError(f"{directory}: manifest field {err} is missing or malformed") from err

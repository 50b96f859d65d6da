"""Fitting a router plugin's back-off after training (:mod:`.backoff`).

Nothing is retrained: from the plugin, its training and dev queries (the familiarity banks and cuts of
the question and the choices) and phrasings written for calibration and held out of everything else
(the offset of the zero-shot head's vote), a back-off is fitted (:func:`fit`).  ``make train`` fits it on
the plugin it holds in memory before writing it, when ``policy.router.backoff`` is set;
``autagent plugin backoff SRC --out DST`` fits it onto a copy of a shipped plugin, adds
``backoff.safetensors`` and re-hashes the copy's manifest.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from ...data.labelled import load_labelled
from ...plugin.manifest import check_tools, read_manifest, write_manifest
from ...plugin.trust import PluginError, file_digest
from .backoff import Backoff, BackoffConfig
from .export import backoff_entry
from .plugin import BACKOFF_FILE, RouterPlugin, check_encoders


def fit(plugin: RouterPlugin, train, dev, config: BackoffConfig | dict) -> tuple[Backoff, dict]:
    """The back-off of the router ``plugin`` (loaded, or a training run's in memory) fitted from the ``train``
    and ``dev`` samples it trained with and ``config.calibration``, and what it fitted."""
    config = config if isinstance(config, BackoffConfig) else BackoffConfig(**config)
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
    return backoff, summary


def fit_backoff(plugin_dir: str | Path, train, dev, config: BackoffConfig | dict) -> dict:
    """Fit the back-off onto the shipped router plugin in ``plugin_dir`` (in place: :func:`fit`, then
    :func:`attach_backoff`); returns what it fitted, with the plugin's new content hash."""
    backoff, summary = fit(open_router(plugin_dir), train, dev, config)
    summary["content_hash"] = attach_backoff(plugin_dir, backoff, summary)
    return summary


def attach_backoff(directory: str | Path, backoff: Backoff, summary: dict) -> str:
    """Write ``backoff.safetensors`` into a verified router plugin, record the back-off's settings and
    ``summary`` in its manifest, re-hash (and re-sign) it; returns the new content hash."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest.get("policy") != "router":
        raise PluginError(f"{directory}: a back-off is for router plugins, this one is {manifest.get('policy')!r}")
    save_file({k: v.contiguous() for k, v in backoff.state_dict().items()}, directory / BACKOFF_FILE)
    digest, size = file_digest(directory / BACKOFF_FILE)
    manifest["files"][BACKOFF_FILE] = {"sha256": digest, "size": size}
    manifest["backoff"] = backoff_entry(backoff, summary)
    return write_manifest(directory, manifest)["content_hash"]


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

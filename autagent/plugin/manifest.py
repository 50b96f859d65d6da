"""The plugin format both policies export: a self-describing folder any reasoner can use unchanged.

Layout (HF's ``save_pretrained`` contract)::

    plugin/
      manifest.json        format, policy kind, the tools it was trained with (id, backend, version)
                           and as OpenAI function tools (what a model that calls tools is offered),
                           encoders (with weight digests), policy config, training config, metrics,
                           file digests and sizes, content hash [, signature]
      README.md            the model card (Hub front matter, usage, the run's evaluation table)
      model.safetensors    the policy's weights (never pickle)

:func:`write_plugin` writes such a folder atomically, once; :func:`read_manifest` checks everything
:mod:`autagent.plugin.trust` describes; :func:`check_tools` that every tool the plugin was trained with is
registered here with the same backend and version.  The policies' own plugin modules
(:mod:`autagent.policies.router.plugin`, :mod:`autagent.policies.lm.plugin`) build on these.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tools import ToolRunner, get_tool
from tools.registry import function_tools

from ..reasoners.json_limits import TooDeep
from ..reasoners.json_limits import loads as bounded_loads
from .card import model_card
from .trust import (
    ALLOWED_SUFFIXES,
    MAX_FILE_BYTES,
    MAX_MANIFEST_BYTES,
    PluginError,
    check_name,
    content_hash,
    file_digest,
    folder_entries,
    sign,
    verify_signature,
)

FORMAT = "autagent-plugin"
FORMAT_VERSION = 2
SIGNING_KEY_ENV = "AUTAGENT_PLUGIN_SIGNING_KEY"  # path of a key file used to sign at export
VERIFY_KEY_ENV = "AUTAGENT_PLUGIN_KEY"  # path of a key file every load verifies with


def tool_manifest(tool_ids, profile: str, settings: dict | None = None, max_seconds: float | None = 30.0) -> list[dict]:
    runner = ToolRunner(profile, settings, max_seconds)
    return [
        {"id": t, "label": get_tool(t).label, "backend": runner.identity(t)[0], "version": runner.identity(t)[1]}
        for t in tool_ids
    ]


WALL_CLOCK_SUFFIXES = ("_seconds", "_time", "_runtime", "_per_second")


def without_timings(metrics):
    """``metrics`` as a plugin records them: wall-clock figures (the router's ``step_seconds``, TRL's
    ``step_time``, ``train_seconds``, transformers' ``train_runtime``...) dropped at any depth, so that
    the same training gives the same content hash on any machine and at any load."""
    if isinstance(metrics, dict):
        return {
            key: without_timings(value)
            for key, value in metrics.items()
            if not (isinstance(key, str) and key.endswith(WALL_CLOCK_SUFFIXES))
        }
    if isinstance(metrics, list):
        return [without_timings(value) for value in metrics]
    return metrics


@dataclass
class PluginTarget:
    """Where a plugin goes and what of its run it records: what both policies' exports take from the run
    (:func:`autagent.policies.export_target`)."""

    directory: Path
    """The plugin folder (built beside it as ``<dir>.tmp`` and renamed into place)."""
    tool_ids: tuple
    """The tools the policy trained with, in its order."""
    tools_profile: str
    """The tools' backends (``embedded`` | ``cluster``): recorded with each tool's backend and version."""
    tool_settings: dict | None
    """The run's per-tool settings, which may change a tool's version."""
    max_seconds: float | None
    """The seconds of a clip the tools hear."""
    training_config: dict
    """The run's resolved config."""
    metrics: dict | None = None
    """What the training measured (recorded without wall-clock figures)."""


def manifest_head(policy: str, target: PluginTarget, fields: dict) -> dict:
    """A plugin's manifest before its files are hashed: format, policy kind, the tools (with backends and
    versions, and as function tools), the policy's own ``fields``, the run's config and its metrics without
    wall-clock figures."""
    head = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "policy": policy,
        "tools": tool_manifest(target.tool_ids, target.tools_profile, target.tool_settings, target.max_seconds),
        "function_tools": function_tools(target.tool_ids),
        "tools_profile": target.tools_profile,
        **fields,
    }
    if "metrics" in head:
        head["metrics"] = without_timings(head["metrics"])
    return head


def write_plugin(directory: str | Path, head: dict, write_files, evaluation: dict | None = None) -> dict:
    """Write a plugin atomically, once: ``write_files(tmp)`` saves the weights, the model card is made from
    ``head`` (with the run's ``evaluation`` table when there is one), every file is hashed into the manifest
    (signed when ``$AUTAGENT_PLUGIN_SIGNING_KEY`` names a key file); the folder is built as ``<dir>.tmp`` and
    renamed into place.  Returns the manifest written."""
    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_files(tmp)
    (tmp / "README.md").write_text(model_card(head, evaluation))
    names, odd = folder_entries(tmp)
    refused = sorted(n for n in names if not n.endswith(ALLOWED_SUFFIXES)) + odd
    if refused:
        raise PluginError(f"{directory}: refusing to export files that are not weights or config files: {refused}")
    files = {}
    for name in sorted(names):
        digest, size = file_digest(tmp / name)
        files[name] = {"sha256": digest, "size": size}
    manifest = write_manifest(tmp, {**head, "files": files})
    shutil.rmtree(directory, ignore_errors=True)
    tmp.rename(directory)
    return manifest


def write_manifest(directory: Path, manifest: dict) -> dict:
    """Hash (and, with ``$AUTAGENT_PLUGIN_SIGNING_KEY``, sign) ``manifest`` and write it atomically."""
    manifest = {k: v for k, v in manifest.items() if k not in ("content_hash", "signature")}
    manifest["content_hash"] = content_hash(manifest)
    if os.environ.get(SIGNING_KEY_ENV):
        manifest["signature"] = sign(manifest, os.environ[SIGNING_KEY_ENV])
    tmp = directory / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, default=str))
    tmp.replace(directory / "manifest.json")
    return manifest


def read_manifest(directory: str | Path, expected_sha256: str | None = None, key_file: str | None = None) -> dict:
    """The verified manifest of a plugin folder: confined names, digests, no extra or odd files, the
    content hash (equal to ``expected_sha256`` when pinned), the signature (when a key is given)."""
    directory = Path(directory)
    if not directory.exists() and not directory.is_symlink():  # a relative path is the working directory's
        where = "" if directory.is_absolute() else f" in {Path.cwd()}"
        raise PluginError(f"{directory}: not a plugin: folder not found{where}")
    if not directory.is_dir() or directory.is_symlink():
        raise PluginError(f"{directory}: not a plugin (not a plain directory)")
    path = directory / "manifest.json"
    if not path.exists():
        raise PluginError(f"{directory}: not a plugin (no manifest.json)")
    check_name(directory, "manifest.json")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise PluginError(f"{path}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = bounded_loads(path.read_text())  # nested past 64 levels: a PluginError, not a RecursionError
    except TooDeep as err:
        raise PluginError(f"{path}: manifest is {err}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PluginError(f"{path}: manifest is not valid JSON ({err})") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PluginError(
            f"{path}: format is {manifest.get('format') if isinstance(manifest, dict) else None!r}, expected {FORMAT!r}"
        )
    if manifest.get("format_version") != FORMAT_VERSION:
        raise PluginError(
            f"{path}: format version {manifest.get('format_version')!r}; this AuTAgent reads {FORMAT_VERSION}"
        )
    if manifest.get("content_hash") != content_hash(manifest):
        raise PluginError(f"{path}: manifest content hash does not match: the manifest was modified")
    if expected_sha256 is not None and manifest["content_hash"] != expected_sha256.strip().lower():
        raise PluginError(f"{directory}: content hash {manifest['content_hash']} is not the pinned {expected_sha256}")
    key_file = key_file or os.environ.get(VERIFY_KEY_ENV)
    if key_file:
        verify_signature(manifest, key_file)
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise PluginError(f"{path}: manifest lists no files")
    present, odd = folder_entries(directory)
    if odd:
        raise PluginError(f"{directory}: plugin folder holds entries that are not regular files: {odd}")
    unlisted = sorted(present - set(files) - {"manifest.json"})
    if unlisted:
        raise PluginError(f"{directory}: files not listed in the manifest: {unlisted}")
    for name, entry in files.items():
        file = check_name(directory, name)
        if not isinstance(entry, dict) or not {"sha256", "size"} <= set(entry):
            raise PluginError(f"{path}: entry for {name} needs sha256 and size")
        if not isinstance(entry["size"], int) or isinstance(entry["size"], bool) or entry["size"] > MAX_FILE_BYTES:
            raise PluginError(f"{path}: {name} declares {entry['size']!r} bytes; at most {MAX_FILE_BYTES} are read")
        if file.stat().st_size != entry["size"]:
            raise PluginError(f"{directory}: {name} is {file.stat().st_size} bytes, the manifest says {entry['size']}")
        if file_digest(file, limit=int(entry["size"]))[0] != entry["sha256"]:
            raise PluginError(
                f"{directory}: {name} does not match its digest in the manifest: "
                "the plugin was tampered with or corrupted"
            )
    return manifest


def check_tools(
    manifest: dict, profile: str | None = None, settings: dict | None = None, max_seconds: float | None = 30.0
) -> None:
    """Refuse a plugin whose tools are not registered here, or differ in backend or version."""
    tools = manifest.get("tools") or []
    missing = []
    for tool in tools:
        try:
            get_tool(tool["id"])
        except KeyError:
            missing.append(tool["id"])
    if missing:
        raise PluginError(
            f"plugin needs tools that are not installed here: {', '.join(missing)} "
            "(register them: tools.extra, or a package with an 'autagent.tools' entry point)"
        )
    installed = {
        t["id"]: t
        for t in tool_manifest([t["id"] for t in tools], profile or manifest["tools_profile"], settings, max_seconds)
    }
    problems = [
        f"tool {t['id']!r}: plugin expects {t['backend']} {t['version']}, installed is "
        f"{installed[t['id']]['backend']} {installed[t['id']]['version']}"
        for t in tools
        if (installed[t["id"]]["backend"], installed[t["id"]]["version"]) != (t["backend"], t["version"])
    ]
    if problems:
        raise PluginError("plugin does not match the installed tools: " + "; ".join(problems))

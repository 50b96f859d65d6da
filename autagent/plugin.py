"""The exported policy: a self-describing directory any reasoner can use unchanged.

Layout (HF's ``save_pretrained`` contract)::

    plugin/
      manifest.json        format, policy kind, tools (id, index, backend, version), encoders,
                           policy config, training config, metrics, file digests, content hash
      model.safetensors    the policy's weights (never pickle)

:func:`load` re-hashes every file and refuses a plugin whose content does not match its
manifest, or whose tools (backend, version) differ from the tools installed here.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

from tools import TOOL_IDS, ToolRunner, get_tool

FORMAT = "autagent-plugin"
FORMAT_VERSION = 1


class PluginError(RuntimeError):
    pass


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _content_hash(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "content_hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def tool_manifest(profile: str, settings: dict | None = None, max_seconds: float | None = 30.0) -> list[dict]:
    runner = ToolRunner(profile, settings, max_seconds)
    return [{"id": t, "index": get_tool(t).index, "backend": runner.identity(t)[0], "version": runner.identity(t)[1]}
            for t in TOOL_IDS]


def export_plugin(directory: str | Path, policy: str, write_files, tools_profile: str, tool_settings: dict | None,
                  max_seconds: float | None, fields: dict) -> Path:
    """Write a plugin atomically: ``write_files(tmp)`` saves the weights, then every file is hashed
    into the manifest; the folder is built as ``<dir>.tmp`` and renamed into place."""
    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_files(tmp)
    files = {str(p.relative_to(tmp)): _digest(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    if any(name.endswith((".bin", ".pt", ".pth", ".pkl")) for name in files):
        raise PluginError(f"{directory}: refusing to export pickled weights ({sorted(files)})")
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "policy": policy,
                "tools": tool_manifest(tools_profile, tool_settings, max_seconds), "tools_profile": tools_profile,
                **fields, "files": files}
    manifest["content_hash"] = _content_hash(manifest)
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
    shutil.rmtree(directory, ignore_errors=True)
    tmp.rename(directory)
    return directory


def export_router(directory: str | Path, router, featurizer, tools_profile: str, tool_settings: dict | None,
                  max_seconds: float | None, training_config: dict, metrics: dict | None = None) -> Path:
    """A router plugin: ``model.safetensors`` plus the encoders it expects."""

    def write(tmp: Path) -> None:
        save_file({k: v.contiguous() for k, v in router.state_dict().items()}, tmp / "model.safetensors")

    return export_plugin(directory, "router", write, tools_profile, tool_settings, max_seconds, {
        "encoders": featurizer.describe(), "input_dim": featurizer.dim, "policy_config": dataclasses.asdict(router.config),
        "training_config": training_config, "metrics": metrics or {}})


def read_manifest(directory: str | Path) -> dict:
    directory = Path(directory)
    path = directory / "manifest.json"
    if not path.exists():
        raise PluginError(f"{directory}: not a plugin (no manifest.json)")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise PluginError(f"{path}: manifest is not valid JSON ({err})") from err
    if manifest.get("format") != FORMAT:
        raise PluginError(f"{path}: format is {manifest.get('format')!r}, expected {FORMAT!r}")
    if manifest.get("content_hash") != _content_hash(manifest):
        raise PluginError(f"{path}: manifest content hash does not match: the manifest was modified")
    present = {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()} - {"manifest.json"}
    unlisted = sorted(present - set(manifest.get("files", {})))
    if unlisted:
        raise PluginError(f"{directory}: files not listed in the manifest: {unlisted}")
    for name, digest in manifest.get("files", {}).items():
        file = directory / name
        if not file.exists():
            raise PluginError(f"{directory}: file {name} listed in the manifest is missing")
        if _digest(file) != digest:
            raise PluginError(f"{directory}: {name} does not match its digest in the manifest: the plugin was tampered with or corrupted")
    return manifest


def check_tools(manifest: dict, profile: str | None = None, settings: dict | None = None, max_seconds: float | None = 30.0) -> None:
    """Refuse a plugin trained against other tools than the ones installed here."""
    installed = {t["id"]: t for t in tool_manifest(profile or manifest["tools_profile"], settings, max_seconds)}
    problems = []
    for tool in manifest["tools"]:
        here = installed.get(tool["id"])
        if here is None:
            problems.append(f"tool {tool['id']!r} is not installed")
        elif (here["backend"], here["version"], here["index"]) != (tool["backend"], tool["version"], tool["index"]):
            problems.append(f"tool {tool['id']!r}: plugin expects {tool['backend']} {tool['version']} (T{tool['index'] + 1}), "
                            f"installed is {here['backend']} {here['version']} (T{here['index'] + 1})")
    missing = set(installed) - {t["id"] for t in manifest["tools"]}
    problems += [f"installed tool {t!r} is unknown to the plugin" for t in sorted(missing)]
    if problems:
        raise PluginError("plugin does not match the installed tools: " + "; ".join(problems))


class RouterPlugin:
    """A loaded router plugin: ``select(audio, question) -> [tool ids]`` for any reasoner."""

    def __init__(self, directory: Path, manifest: dict):
        from .policies.router import Featurizer, Router, RouterConfig

        self.directory, self.manifest = directory, manifest
        config = RouterConfig(**manifest["policy_config"])
        self.featurizer = Featurizer(config)
        if self.featurizer.dim != manifest["input_dim"]:
            raise PluginError(f"{directory}: encoders give {self.featurizer.dim}-dim features, plugin expects {manifest['input_dim']}")
        self.router = Router(self.featurizer.dim, config)
        self.router.load_state_dict(load_file(directory / "model.safetensors"))
        self.router.eval()

    @property
    def tools(self) -> list[str]:
        return [t["id"] for t in self.manifest["tools"]]

    def select_many(self, samples) -> list[tuple[str, ...]]:
        from .policies.router import subset_ids

        return [subset_ids(row) for row in self.router.select(self.featurizer.of_samples(samples))]

    def select(self, audio: str, question: str) -> list[str]:
        from .data.sample import Sample

        query = Sample(id="query", audio=str(audio), question=question, choices=(), answer="")
        return list(self.select_many([query])[0])

    def probabilities(self, audio: str, question: str) -> dict[str, float]:
        probs = self.router.tool_probabilities(self.featurizer([question], [str(audio)]))[0]
        return {t: round(float(p), 4) for t, p in zip(TOOL_IDS, probs)}


def load(directory: str | Path, check_installed_tools: bool = True, tools_profile: str | None = None,
         tool_settings: dict | None = None):
    """Load and verify a plugin directory (hashes, tools); raises :class:`PluginError` with the reason."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if check_installed_tools:
        check_tools(manifest, tools_profile, tool_settings)
    kind = manifest.get("policy")
    if kind == "router":
        return RouterPlugin(directory, manifest)
    if kind == "lm":
        from .policies.lm import LMPlugin

        return LMPlugin(directory, manifest)
    raise PluginError(f"{directory}: unknown policy kind {kind!r}")


__all__ = ["PluginError", "RouterPlugin", "check_tools", "export_router", "load", "read_manifest"]

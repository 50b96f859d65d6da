"""The exported policy: a self-describing directory any reasoner can use unchanged.

Layout (HF's ``save_pretrained`` contract)::

    plugin/
      manifest.json        format, policy kind, the tools it was trained with (id, backend, version),
                           encoders (with weight digests), policy config, training config, metrics,
                           file digests and sizes, content hash [, signature]
      model.safetensors    the policy's weights (never pickle)

:func:`load` checks everything :mod:`autagent.trust` describes, then that every tool the plugin was
trained with is registered here with the same backend and version (a missing one is named), and
that the encoders installed here are the ones it was trained on.  A plugin only ever selects among
its own tools.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

from tools import ToolRunner, get_tool

from .trust import (ALLOWED_SUFFIXES, MAX_MANIFEST_BYTES, PluginError, check_name, content_hash, file_digest,
                    folder_entries, sign, verify_signature)

FORMAT = "autagent-plugin"
FORMAT_VERSION = 2
SIGNING_KEY_ENV = "AUTAGENT_PLUGIN_SIGNING_KEY"  # path of a key file used to sign at export
VERIFY_KEY_ENV = "AUTAGENT_PLUGIN_KEY"  # path of a key file every load verifies with


def tool_manifest(tool_ids, profile: str, settings: dict | None = None, max_seconds: float | None = 30.0) -> list[dict]:
    runner = ToolRunner(profile, settings, max_seconds)
    return [{"id": t, "label": get_tool(t).label, "backend": runner.identity(t)[0], "version": runner.identity(t)[1]}
            for t in tool_ids]


def export_plugin(directory: str | Path, policy: str, write_files, tool_ids, tools_profile: str,
                  tool_settings: dict | None, max_seconds: float | None, fields: dict) -> Path:
    """Write a plugin atomically: ``write_files(tmp)`` saves the weights, then every file is hashed
    into the manifest (signed when ``$AUTAGENT_PLUGIN_SIGNING_KEY`` names a key file); the folder is
    built as ``<dir>.tmp`` and renamed into place."""
    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_files(tmp)
    names, odd = folder_entries(tmp)
    refused = sorted(n for n in names if not n.endswith(ALLOWED_SUFFIXES)) + odd
    if refused:
        raise PluginError(f"{directory}: refusing to export files that are not weights or config files: {refused}")
    files = {}
    for name in sorted(names):
        digest, size = file_digest(tmp / name)
        files[name] = {"sha256": digest, "size": size}
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "policy": policy,
                "tools": tool_manifest(tool_ids, tools_profile, tool_settings, max_seconds), "tools_profile": tools_profile,
                **fields, "files": files}
    manifest["content_hash"] = content_hash(manifest)
    if os.environ.get(SIGNING_KEY_ENV):
        manifest["signature"] = sign(manifest, os.environ[SIGNING_KEY_ENV])
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
    shutil.rmtree(directory, ignore_errors=True)
    tmp.rename(directory)
    return directory


def export_router(directory: str | Path, router, featurizer, tool_ids, tools_profile: str, tool_settings: dict | None,
                  max_seconds: float | None, training_config: dict, metrics: dict | None = None) -> Path:
    """A router plugin: ``model.safetensors`` plus the encoders it expects."""

    def write(tmp: Path) -> None:
        save_file({k: v.contiguous() for k, v in router.state_dict().items()}, tmp / "model.safetensors")

    return export_plugin(directory, "router", write, tool_ids, tools_profile, tool_settings, max_seconds, {
        "encoders": featurizer.describe(), "input_dim": featurizer.dim, "policy_config": dataclasses.asdict(router.config),
        "training_config": training_config, "metrics": metrics or {}})


def read_manifest(directory: str | Path, expected_sha256: str | None = None, key_file: str | None = None) -> dict:
    """The verified manifest of a plugin folder: confined names, digests, no extra or odd files, the
    content hash (equal to ``expected_sha256`` when pinned), the signature (when a key is given)."""
    directory = Path(directory)
    if not directory.is_dir() or directory.is_symlink():
        raise PluginError(f"{directory}: not a plugin (not a plain directory)")
    path = directory / "manifest.json"
    if not path.exists():
        raise PluginError(f"{directory}: not a plugin (no manifest.json)")
    check_name(directory, "manifest.json")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise PluginError(f"{path}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PluginError(f"{path}: manifest is not valid JSON ({err})") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PluginError(f"{path}: format is {manifest.get('format') if isinstance(manifest, dict) else None!r}, "
                          f"expected {FORMAT!r}")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise PluginError(f"{path}: format version {manifest.get('format_version')!r}; this AuTAgent reads {FORMAT_VERSION}")
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
        if file.stat().st_size != entry["size"]:
            raise PluginError(f"{directory}: {name} is {file.stat().st_size} bytes, the manifest says {entry['size']}")
        if file_digest(file, limit=int(entry["size"]))[0] != entry["sha256"]:
            raise PluginError(f"{directory}: {name} does not match its digest in the manifest: "
                              "the plugin was tampered with or corrupted")
    return manifest


def check_tools(manifest: dict, profile: str | None = None, settings: dict | None = None,
                max_seconds: float | None = 30.0) -> None:
    """Refuse a plugin whose tools are not registered here, or differ in backend or version."""
    tools = manifest.get("tools") or []
    missing = []
    for tool in tools:
        try:
            get_tool(tool["id"])
        except KeyError:
            missing.append(tool["id"])
    if missing:
        raise PluginError(f"plugin needs tools that are not installed here: {', '.join(missing)} "
                          "(register them: tools.extra, or a package with an 'autagent.tools' entry point)")
    installed = {t["id"]: t for t in tool_manifest([t["id"] for t in tools], profile or manifest["tools_profile"],
                                                   settings, max_seconds)}
    problems = [f"tool {t['id']!r}: plugin expects {t['backend']} {t['version']}, installed is "
                f"{installed[t['id']]['backend']} {installed[t['id']]['version']}"
                for t in tools if (installed[t["id"]]["backend"], installed[t["id"]]["version"]) != (t["backend"], t["version"])]
    if problems:
        raise PluginError("plugin does not match the installed tools: " + "; ".join(problems))


def check_encoders(manifest: dict) -> None:
    """The text and audio encoders installed here must be the very ones the plugin was trained on."""
    from .encoders import AudioEncoder, text_encoder

    wanted = manifest.get("encoders") or {}
    here = {"text": text_encoder(None).describe(), "audio": AudioEncoder.describe() if wanted.get("audio") else None}
    for kind in ("text", "audio"):
        theirs, ours = wanted.get(kind), here[kind]
        if theirs != ours:
            raise PluginError(f"plugin's {kind} encoder {theirs!r} is not the one installed here {ours!r}")


class RouterPlugin:
    """A loaded router plugin: ``select(audio, question, choices) -> [tool ids]`` for any reasoner."""

    def __init__(self, directory: Path, manifest: dict):
        from .policies.router import Featurizer, Router, RouterConfig

        self.directory, self.manifest = directory, manifest
        config = dict(manifest["policy_config"], text_model=None)  # the installed encoder, checked above
        config = RouterConfig(**config)
        self.featurizer = Featurizer(config)
        if self.featurizer.dim != manifest["input_dim"]:
            raise PluginError(f"{directory}: encoders give {self.featurizer.dim}-dim features, plugin expects {manifest['input_dim']}")
        self.router = Router(self.featurizer.dim, config, len(self.tools))
        try:
            self.router.load_state_dict(load_file(directory / "model.safetensors"))
        except (RuntimeError, KeyError, OSError) as err:
            raise PluginError(f"{directory}: model.safetensors does not fit the declared router ({err})") from err
        self.router.eval()

    @property
    def tools(self) -> list[str]:
        return [t["id"] for t in self.manifest["tools"]]

    def select_many(self, samples) -> list[tuple[str, ...]]:
        from .policies.router import subset_ids

        return [subset_ids(row, self.tools) for row in self.router.select(self.featurizer.of_samples(samples))]

    def select(self, audio: str, question: str, choices=()) -> list[str]:
        from .data.sample import Sample

        query = Sample(id="query", audio=str(audio), question=question, choices=tuple(choices), answer="")
        return list(self.select_many([query])[0])

    def probabilities(self, audio: str, question: str, choices=()) -> dict[str, float]:
        probs = self.router.tool_probabilities(self.featurizer([question], [str(audio)], [tuple(choices)]))[0]
        return {t: round(float(p), 4) for t, p in zip(self.tools, probs)}


def _malformed(directory, err: Exception) -> str:
    """The message for a manifest whose fields have the wrong shape (a KeyError, TypeError or ValueError)."""
    return f"{directory}: manifest field {err} is missing or malformed"


def load(directory: str | Path, check_installed_tools: bool = True, tools_profile: str | None = None,
         tool_settings: dict | None = None, expected_sha256: str | None = None, key_file: str | None = None):
    """Load and verify a plugin directory; raises :class:`PluginError` with the reason."""
    directory = Path(directory)
    manifest = read_manifest(directory, expected_sha256, key_file)
    try:
        if check_installed_tools:
            check_tools(manifest, tools_profile, tool_settings)
        kind = manifest.get("policy")
        if kind == "router":
            check_encoders(manifest)
            return RouterPlugin(directory, manifest)
        if kind == "lm":
            from .policies.lm.plugin import LMPlugin

            return LMPlugin(directory, manifest)
    except (KeyError, TypeError, ValueError) as err:  # a signed-off manifest whose fields have the wrong shape
        raise PluginError(_malformed(directory, err)) from err
    raise PluginError(f"{directory}: unknown policy kind {kind!r}")


def verify(directory: str | Path, expected_sha256: str | None = None, key_file: str | None = None,
           tools_profile: str | None = None, tool_settings: dict | None = None) -> dict:
    """Every check :func:`load` makes, reported instead of raised (``autagent plugin verify``)."""
    report = {"plugin": str(directory), "ok": False, "checks": {}}
    try:
        manifest = read_manifest(directory, expected_sha256, key_file)
    except PluginError as err:
        report["checks"]["files_and_hash"] = str(err)
        return report
    key = key_file or os.environ.get(VERIFY_KEY_ENV)
    report.update(content_hash=manifest["content_hash"], policy=manifest.get("policy"),
                  tools=[t["id"] for t in manifest.get("tools", [])],
                  signature=(manifest.get("signature") or {}).get("kind"))
    report["checks"]["files_and_hash"] = "ok"
    report["checks"]["pinned_hash"] = "ok" if expected_sha256 else "not pinned"
    report["checks"]["signature"] = ("verified" if key else "not checked (no key given)") if manifest.get("signature") else (
        "unsigned")
    for name, check in (("tools", lambda: check_tools(manifest, tools_profile, tool_settings)),
                        ("encoders", lambda: check_encoders(manifest) if manifest.get("policy") == "router" else None),
                        ("loads", lambda: load(directory, True, tools_profile, tool_settings, expected_sha256, key_file))):
        try:
            check()
            report["checks"][name] = "ok"
        except PluginError as err:
            report["checks"][name] = str(err)
        except (KeyError, TypeError, ValueError) as err:  # a manifest whose fields have the wrong shape
            report["checks"][name] = _malformed(directory, err)
    report["ok"] = all(v in ("ok", "not pinned", "verified", "unsigned", "not checked (no key given)")
                       for v in report["checks"].values())
    return report


__all__ = ["PluginError", "RouterPlugin", "check_tools", "export_router", "load", "read_manifest", "verify"]

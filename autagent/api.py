"""A trained plugin, loaded: :func:`load` for the policy's own object, :class:`Plugin` for people who
call models themselves (``from autagent import Plugin``).

    plugin = Plugin.load("runs/embedded_main/plugin", sha256="...")
    plugin.select("clip.wav", "What is the tempo?", ["70 BPM", "120 BPM"])   # -> ["tempo"]
    messages = plugin.augment(messages)      # the chat messages with the chosen tools' records added
    client.chat.completions.create(model=..., messages=messages)             # any OpenAI-compatible client

:meth:`Plugin.augment` reads the clip and the question from the last user message (an OpenAI
``input_audio`` part or a vLLM ``audio_url`` data URL), selects tools, runs them through the same
pool and content-addressed cache as training, and writes their records in front of the user's text
exactly as evaluation shows them to a reasoner.  What a loaded plugin does is
:class:`autagent.plugin.loaded.Plugin`'s; this module's subclass adds :meth:`Plugin.load`, which opens
the folder through the policy that wrote it (a layer above :mod:`autagent.plugin`).

:func:`load` verifies a plugin folder, whichever policy exported it (its format and trust:
:mod:`autagent.plugin`), the installed tools and encoders, and returns the policy's plugin object;
:func:`verify` reports every check instead of raising.  This module stands above the policies (it
opens the policy that exported a plugin); the format they write stands below them.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from tools.pool import PoolConfig, ToolPool

from .data.user_cache import cache_path
from .plugin import loaded
from .plugin.loaded import Augmented
from .plugin.manifest import VERIFY_KEY_ENV, check_tools, read_manifest
from .plugin.trust import PluginError

__all__ = ["Augmented", "Plugin", "load", "policy_module", "run_tools", "verify"]


def policy_module(manifest: dict, directory):
    """The module of the policy that exported the plugin: ``check_encoders(manifest)`` and
    ``open_plugin(directory, manifest)``."""
    kind = manifest.get("policy")
    if kind == "router":
        from .policies.router import plugin as module
    elif kind == "lm":
        from .policies.lm import plugin as module
    else:
        raise PluginError(f"{directory}: unknown policy kind {kind!r}")
    return module


def _malformed(directory, err: Exception) -> str:
    """The message for a manifest whose fields have the wrong shape (a KeyError, TypeError or ValueError)."""
    return f"{directory}: manifest field {err} is missing or malformed"


def load(
    directory: str | Path,
    check_installed_tools: bool = True,
    tools_profile: str | None = None,
    tool_settings: dict | None = None,
    expected_sha256: str | None = None,
    key_file: str | None = None,
    extra_tools=(),
):
    """Load and verify a plugin directory; raises :class:`PluginError` with the reason.  ``extra_tools``:
    registered tools it never trained with, scored from their descriptions (``tool_conditioned``
    routers only)."""
    directory = Path(directory)
    manifest = read_manifest(directory, expected_sha256, key_file)
    try:
        if check_installed_tools:
            check_tools(manifest, tools_profile, tool_settings)
        policy = policy_module(manifest, directory)
        policy.check_encoders(manifest)
        return policy.open_plugin(directory, manifest, tuple(extra_tools))
    except (KeyError, TypeError, ValueError) as err:  # a signed-off manifest whose fields have the wrong shape
        raise PluginError(_malformed(directory, err)) from err


def run_tools(pool, manifest: dict):
    """A plugin brings its tools: the run's tool library (a :class:`tools.pool.PoolConfig`) when a plugin
    is given, and the tools the plugin is to score zero-shot.  With ``tools.enabled`` left out, the
    plugin's own tools; named, it must include them (a conflict is one clear error), and the other
    tools it names are added to a plugin that scores new tools from their descriptions."""
    learned = [t["id"] for t in manifest.get("tools") or []]
    if pool.enabled is None:
        try:
            return dataclasses.replace(pool, enabled=learned), []
        except ValueError as err:
            raise PluginError(f"the plugin's tools {learned} do not fit the run's tools settings: {err}") from None
    missing = [t for t in learned if t not in pool.tool_ids]
    if missing:
        raise PluginError(
            f"the plugin selects tools this run does not enable: {missing}; add them to tools.enabled, or leave "
            f"tools.enabled out to take the plugin's own {learned}"
        )
    return pool, [t for t in pool.tool_ids if t not in learned] if manifest.get("scores_new_tools") else []


def verify(
    directory: str | Path,
    expected_sha256: str | None = None,
    key_file: str | None = None,
    tools_profile: str | None = None,
    tool_settings: dict | None = None,
) -> dict:
    """Every check :func:`load` makes, reported instead of raised (``autagent plugin verify``)."""
    report = {"plugin": str(directory), "ok": False, "checks": {}}
    try:
        manifest = read_manifest(directory, expected_sha256, key_file)
    except PluginError as err:
        report["checks"]["files_and_hash"] = str(err)
        return report
    key = key_file or os.environ.get(VERIFY_KEY_ENV)
    report.update(
        content_hash=manifest["content_hash"],
        policy=manifest.get("policy"),
        tools=[t["id"] for t in manifest.get("tools", [])],
        signature=(manifest.get("signature") or {}).get("kind"),
    )
    report["checks"]["files_and_hash"] = "ok"
    report["checks"]["pinned_hash"] = "ok" if expected_sha256 else "not pinned"
    report["checks"]["signature"] = (
        ("verified" if key else "not checked (no key given)") if manifest.get("signature") else ("unsigned")
    )
    for name, check in (
        ("tools", lambda: check_tools(manifest, tools_profile, tool_settings)),
        ("encoders", lambda: policy_module(manifest, directory).check_encoders(manifest)),
        ("loads", lambda: load(directory, True, tools_profile, tool_settings, expected_sha256, key_file)),
    ):
        try:
            check()
            report["checks"][name] = "ok"
        except PluginError as err:
            report["checks"][name] = str(err)
        except (KeyError, TypeError, ValueError) as err:  # a manifest whose fields have the wrong shape
            report["checks"][name] = _malformed(directory, err)
    report["ok"] = all(
        v in ("ok", "not pinned", "verified", "unsigned", "not checked (no key given)")
        for v in report["checks"].values()
    )
    return report


class Plugin(loaded.Plugin):
    """A plugin folder, loaded and verified, at work (:class:`autagent.plugin.loaded.Plugin`: select, augment,
    stream); ``from autagent import Plugin`` is this class."""

    @classmethod
    def load(
        cls,
        directory: str | Path,
        sha256: str | None = None,
        tools: PoolConfig | None = None,
        audio_dir: str | Path = ".cache/chat-audio",
        max_audio_bytes: int = 25 << 20,
    ) -> Plugin:
        """Load and verify a plugin (pinned to ``sha256`` when given); its tools run on ``tools`` (default:
        in this process, cached in ``.cache/tools``), the plugin's own unless that config names others;
        ``.cache/...`` is under the per-user cache folder (:mod:`autagent.data.user_cache`)."""
        manifest = read_manifest(directory, sha256)
        tools = tools or PoolConfig(executor="local", cache_dir=cache_path(".cache/tools"))
        audio_dir = cache_path(audio_dir)
        pool_config, extra = run_tools(tools, manifest)
        plugin = load(
            directory,
            tools_profile=pool_config.profile,
            tool_settings=pool_config.settings,
            expected_sha256=sha256,
            extra_tools=extra,
        )
        return cls(plugin, manifest, ToolPool(pool_config), Path(audio_dir), max_audio_bytes)

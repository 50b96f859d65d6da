"""A trained plugin, loaded: :func:`load` for the policy's own object, :class:`Plugin` for people who
call models themselves (``from autagent import Plugin``).

    plugin = Plugin.load("runs/embedded_main/plugin", sha256="...")
    plugin.select("clip.wav", "What is the tempo?", ["70 BPM", "120 BPM"])   # -> ["tempo"]
    messages = plugin.augment(messages)      # the chat messages with the chosen tools' records added
    client.chat.completions.create(model=..., messages=messages)             # any OpenAI-compatible client

:meth:`Plugin.augment` reads the clip and the question from the last user message (an OpenAI
``input_audio`` part or a vLLM ``audio_url`` data URL), selects tools, runs them through the same
pool and content-addressed cache as training, and writes their records in front of the user's text
exactly as evaluation shows them to a reasoner.  ``autagent serve`` calls the same code, so its
upstream prompt and this method's are the same bytes.

:func:`load` verifies a plugin folder, whichever policy exported it (its format and trust:
:mod:`autagent.plugin`), the installed tools and encoders, and returns the policy's plugin object;
:func:`verify` reports every check instead of raising.  This module stands above the policies (it
opens the policy that exported a plugin); the format they write stands below them.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from tools.audio import content_hash as clip_hash
from tools.audio import without_paths
from tools.pool import PoolConfig, ToolPool

from .data.user_cache import cache_path
from .plugin.dial import Dial, set_dial
from .plugin.manifest import VERIFY_KEY_ENV, check_tools, read_manifest
from .plugin.stream_session import StreamSession
from .plugin.trust import PluginError
from .reasoners.messages import BadRequest, ChatQuery, read_query, with_records


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


@dataclass
class Augmented:
    """What :meth:`Plugin.augment_query` did: the messages to send on, the tools chosen, the tools
    whose record failed (dropped), and the time each stage took."""

    messages: list
    tools: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


class Plugin:
    def __init__(self, plugin, manifest: dict, pool: ToolPool, audio_dir: Path, max_audio_bytes: int):
        self.plugin, self.manifest, self.pool = plugin, manifest, pool
        self.audio_dir, self.max_audio_bytes = Path(audio_dir), max_audio_bytes

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

    @property
    def content_hash(self) -> str:
        return self.manifest["content_hash"]

    @property
    def tools(self) -> list[str]:
        return list(self.plugin.tools)

    def select(self, audio: str, question: str, choices=()) -> list[str]:
        return list(self.plugin.select(str(audio), question, tuple(choices)))

    def set_dial(
        self,
        max_tools: int | None = None,
        latency_budget_ms: float | None = None,
        tools: int | None = None,
        uncertified: bool = False,
    ) -> Plugin:
        """Set every selection's operating point (:mod:`autagent.plugin.dial`): exactly the ``tools`` most
        probable tools, at most ``max_tools`` of the threshold's, and/or the tools whose measured seconds
        fit ``latency_budget_ms``; none of them: the plugin's certified point (``uncertified``: its trained
        threshold)."""
        dial = Dial(max_tools, latency_budget_ms, tools)
        if uncertified and hasattr(self.plugin, "dial"):
            self.plugin.dial = None
        set_dial(self.plugin, dial)
        return self

    @property
    def certificate(self) -> dict | None:
        """What ``autagent adapt --certify`` certified (the point, its margin, items and interval), or None."""
        return self.manifest.get("certificate")

    def probabilities(self, audio: str, question: str, choices=()) -> dict[str, float] | None:
        """Each tool's probability of being called (a router's; None for an LM agent, which writes a list)."""
        probabilities = getattr(self.plugin, "probabilities", None)
        return probabilities(str(audio), question, tuple(choices)) if probabilities else None

    def explain(self, audio: str, question: str, choices=()) -> dict | None:
        """Why these tools: unfamiliar inputs and, per tool, probabilities and whether the back-off decided
        (a router's; None for an LM agent)."""
        explain = getattr(self.plugin, "explain", None)
        return explain(str(audio), question, tuple(choices)) if explain else None

    def read(self, messages, choices=None) -> ChatQuery:
        """The clip (stored by content), question and choices of a chat request."""
        query = read_query(messages, choices, self.audio_dir, self.max_audio_bytes)
        if query.remote:
            raise BadRequest("the clip is a remote URL: fetch it and send it as input_audio or a data: URL")
        return query

    def augment_query(self, messages, query: ChatQuery) -> Augmented:
        """Select for ``query``, run the tools, and add the records that came back to ``messages``; a
        tool that fails is dropped and named, never the request.  With no tool chosen (or none that
        worked), the messages go on unchanged."""
        import time

        started = time.perf_counter()
        tools = self.select(query.audio, query.question, query.choices)
        seconds = {"select": time.perf_counter() - started}
        if not tools:
            return Augmented(copy.deepcopy(messages), [], {}, seconds)
        started = time.perf_counter()
        records = self.pool.run(query.audio, tools)
        seconds["tools"] = time.perf_counter() - started
        failed = {t: without_paths(r["error"], query.audio) for t, r in records.items() if "error" in r}
        good = [r for r in records.values() if "error" not in r]
        augmented = with_records(messages, good) if good else copy.deepcopy(messages)
        return Augmented(augmented, tools, failed, seconds)

    # -- a clip that is still arriving (autagent.plugin.stream_session) ------------------------------
    def stream(
        self, sample_rate: int = 24000, max_seconds: float | None = None, listeners=(), store=None, executor=None
    ):
        """A :class:`autagent.plugin.stream_session.StreamSession`: feed 16-bit PCM chunks, ask the question whenever
        it comes, commit, and get the records when ready (what ``/v1/realtime`` runs on); at most
        ``max_seconds`` of audio (default: what the tools hear, ``tools.max_seconds``); ``listeners``
        hear the clip as it arrives too (a reasoner's ear); ``store`` holds the committed clip (a
        service's bounded folder), ``executor`` runs the session's work (a service's bounded pool)."""
        seconds = max_seconds or self.pool.config.max_seconds
        return StreamSession(self, sample_rate, seconds, listeners=listeners, store=store, executor=executor)

    def warm(self) -> None:
        """Load every tool's model and run it once on a synthetic clip (librosa's kernels compiled, the
        first request pays nothing extra); the records are not cached."""
        import tempfile

        import numpy as np
        import soundfile as sf

        t = np.arange(2 * 16000) / 16000
        tone = (0.3 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 2 * t) > 0)).astype(np.float32)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "warm.wav"
            sf.write(str(path), tone, 16000)
            for tool_id in self.pool.tool_ids:
                self.pool.runner.run(tool_id, str(path))
            self.select(str(path), "warm up", ["a", "b"])

    @property
    def reads_audio(self) -> bool:
        """Whether the selection reads the clip (a router with audio among its inputs; an LM agent)."""
        featurizer = getattr(self.plugin, "featurizer", None)
        return featurizer is None or featurizer.audio is not None

    def prime_audio(self, path: str, probs, samples_16k) -> None:
        """Give the router the clip's profile from YAMNet's probabilities already computed as it arrived."""
        featurizer = getattr(self.plugin, "featurizer", None)
        if featurizer is not None and featurizer.audio is not None:
            featurizer.audio.prime(path, probs, samples_16k)

    def remember(self, path: str, records) -> None:
        """Keep records computed outside the pool in its cache, under the clip's content and the record's
        own version (a streamed equivalent's ends in ``+stream``)."""
        key = clip_hash(path)
        for record in records:
            self.pool.cache.put(key, record["tool"], record["backend"], record["version"], record)

    def augment(self, messages, choices=None) -> list:
        """``messages`` with the chosen tools' records in front of the last user message's text (a copy;
        the input is not changed)."""
        return self.augment_query(messages, self.read(messages, choices)).messages

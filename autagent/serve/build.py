"""The service's parts from a run config and its settings: the backend (our reasoner in process, or an
OpenAI-compatible upstream), the plugin with its dial, the tool pool of ``--agentic`` without a plugin,
and the bounded clip store; :func:`build` is what ``autagent serve`` and the tests start from."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tools.pool import ToolPool

from ..api import Plugin
from ..config import ConfigError
from ..reasoners import build_reasoner
from ..reasoners.scripted import ScriptedCaller
from .limits import AudioStore
from .options import ServeOptions
from .service import Service
from .tool_calls import ScriptedUpstream
from .upstream import LocalReasoner, OpenAIUpstream
from .upstream_audio import AudioPolicy


def build(config, options: ServeOptions | None = None, **settings) -> Service:
    """The service's parts from a run config (reasoner and tool settings) and its settings (``options``,
    or ServeOptions' fields as keywords)."""
    options = dataclasses.replace(options, **settings) if options is not None else ServeOptions(**settings)
    if (options.reasoner is None) == (options.upstream is None):
        raise ConfigError("give exactly one of --reasoner (answer in process) and --upstream (forward to a server)")
    audio_dir, max_bytes = Path(options.audio_dir), options.max_audio_bytes
    store = AudioStore(audio_dir, options.audio_cache_bytes)
    if options.upstream is not None:
        backend = OpenAIUpstream(
            options.upstream,
            options.api_key_env,
            options.model,
            options.upstream_timeout_s,
            options.upstream_retries,
            options.upstream_audio,
            options.upstream_sample_rate,
            options.max_upstream_reply_bytes,
        )
        backend.audio_policy = AudioPolicy.of(options, config.tools.max_seconds)  # every message's clips (issue 62)
    else:
        reasoner = options.reasoner
        config.reasoner.kind = "embedded" if reasoner == "scripted" else reasoner
        built = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
        built.bound(options.max_memory_answers)
        backend = LocalReasoner(built, reasoner, audio_dir, max_bytes, store)
        if reasoner == "scripted":  # the open stand-in for a model that calls tools, answering with it
            backend = ScriptedUpstream(ScriptedCaller(built, config.eval.agentic.scripted, audio_dir, max_bytes))
    plugin = tools = None
    if options.plugin is not None:
        plugin = Plugin.load(
            options.plugin, options.plugin_sha256, tools=config.tools, audio_dir=audio_dir, max_audio_bytes=max_bytes
        )
        plugin.set_dial(options.max_tools, options.latency_budget_ms, options.tools, options.uncertified)
        if options.warm_up:
            plugin.warm()
    if options.agentic and plugin is None:  # every tool of the run is offered to the upstream
        tools = ToolPool(config.tools)
    return Service(options, backend, plugin, tools, store, config.tools.max_seconds)

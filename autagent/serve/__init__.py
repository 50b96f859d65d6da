"""``autagent serve``: a trained plugin in front of any audio model, as an OpenAI-compatible service.

Three roles that combine: ``--reasoner KIND`` answers with one of our reasoners in process;
``--upstream URL`` forwards to any OpenAI-compatible server (vLLM, OpenAI); ``--plugin DIR`` selects
tools for each request, runs them and adds their records before the request goes on.  See
:mod:`.app` for the endpoints and the errors, :mod:`autagent.api` for the same plugin in Python.
"""

from __future__ import annotations

from pathlib import Path

from .app import ServeOptions, create_app


def build(
    config,
    reasoner: str | None,
    upstream: str | None,
    plugin_dir: str | None,
    plugin_sha256: str | None,
    model: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    timeout_s: float = 120.0,
    max_retries: int = 2,
    **limits,
) -> ServeOptions:
    """The service's parts from a run config (reasoner and tool settings) and the command's flags."""
    from ..config import ConfigError
    from .limits import AudioStore
    from .upstream import LocalReasoner, OpenAIUpstream

    if (reasoner is None) == (upstream is None):
        raise ConfigError("give exactly one of --reasoner (answer in process) and --upstream (forward to a server)")
    if limits.get("max_tool_rounds", 0) < 0:
        raise ConfigError(f"--max-tool-rounds must be >= 0, got {limits['max_tool_rounds']}")
    audio_dir = Path(limits.get("audio_dir", ServeOptions.audio_dir))
    max_bytes = limits.get("max_audio_bytes", ServeOptions.max_audio_bytes)
    if limits.get("max_audio_seconds") is None:  # the default: what the tools hear, and no more
        limits["max_audio_seconds"] = config.tools.max_seconds
    limits["tools_max_seconds"] = config.tools.max_seconds
    cap = limits.get("audio_cache_bytes", ServeOptions.audio_cache_bytes)
    store = limits["audio_store"] = AudioStore(audio_dir, cap)
    if upstream is not None:
        backend = OpenAIUpstream(upstream, api_key_env, model, timeout_s, max_retries)
    else:
        from ..reasoners import build_reasoner

        config.reasoner.kind = "embedded" if reasoner == "scripted" else reasoner
        built = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
        built.bound(limits.pop("max_memory_answers", 100_000))
        backend = LocalReasoner(built, reasoner, audio_dir, max_bytes, store)
        if reasoner == "scripted":  # the open stand-in for a model that calls tools, answering with it
            from ..reasoners.scripted import ScriptedCaller
            from .agentic import ScriptedUpstream

            backend = ScriptedUpstream(ScriptedCaller(built, config.eval.agentic.scripted, audio_dir, max_bytes))
    plugin = None
    if plugin_dir is not None:
        from ..api import Plugin

        plugin = Plugin.load(
            plugin_dir, plugin_sha256, tools=config.tools, audio_dir=audio_dir, max_audio_bytes=max_bytes
        )
        if limits.pop("warm", False):
            plugin.warm()
    limits.pop("warm", None)
    limits.pop("max_memory_answers", None)
    if limits.get("agentic") and plugin is None:  # every tool of the run is offered to the upstream
        from tools.pool import ToolPool

        limits["tools"] = ToolPool(config.tools)
    return ServeOptions(upstream=backend, plugin=plugin, **limits)


def spawn(*args: str, cwd=None, env: dict | None = None, timeout: float = 120.0, stderr=None):
    """``autagent serve *args`` in a new process on a free loopback port; returns (process, base URL)
    once ``/health`` answers (an integration test's or a benchmark's service).  Raises RuntimeError
    with the service's last output if it exits first, TimeoutError if it never answers."""
    import os
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "autagent.cli", "serve", "--port", str(port), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stderr=subprocess.PIPE if stderr is None else stderr,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"autagent serve exited: {(process.stderr.read() if process.stderr else '')[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.3)
    process.terminate()
    raise TimeoutError(f"autagent serve did not answer on {url} within {timeout:g} s")


__all__ = ["ServeOptions", "build", "create_app", "spawn"]

"""``autagent serve``: a trained plugin in front of any audio model, as an OpenAI-compatible service.

Three roles that combine: ``--reasoner KIND`` answers with one of our reasoners in process;
``--upstream URL`` forwards to any OpenAI-compatible server (vLLM, OpenAI); ``--plugin DIR`` selects
tools for each request, runs them and adds their records before the request goes on.  See
:mod:`.app` for the endpoints and the errors, :mod:`autagent.api` for the same plugin in Python.
"""

from __future__ import annotations

from pathlib import Path

from .app import create_app
from .options import ServeOptions
from .service import Service


def build(config, options: ServeOptions | None = None, **settings) -> Service:
    """The service's parts from a run config (reasoner and tool settings) and its settings (``options``,
    or ServeOptions' fields as keywords)."""
    import dataclasses

    from ..config import ConfigError
    from .limits import AudioStore
    from .upstream import LocalReasoner, OpenAIUpstream

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
        )
    else:
        from ..reasoners import build_reasoner

        reasoner = options.reasoner
        config.reasoner.kind = "embedded" if reasoner == "scripted" else reasoner
        built = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
        built.bound(options.max_memory_answers)
        backend = LocalReasoner(built, reasoner, audio_dir, max_bytes, store)
        if reasoner == "scripted":  # the open stand-in for a model that calls tools, answering with it
            from ..reasoners.scripted import ScriptedCaller
            from .tool_calls import ScriptedUpstream

            backend = ScriptedUpstream(ScriptedCaller(built, config.eval.agentic.scripted, audio_dir, max_bytes))
    plugin = tools = None
    if options.plugin is not None:
        from ..api import Plugin

        plugin = Plugin.load(
            options.plugin, options.plugin_sha256, tools=config.tools, audio_dir=audio_dir, max_audio_bytes=max_bytes
        )
        plugin.set_dial(options.max_tools, options.latency_budget_ms)
        if options.warm_up:
            plugin.warm()
    if options.agentic and plugin is None:  # every tool of the run is offered to the upstream
        from tools.pool import ToolPool

        tools = ToolPool(config.tools)
    return Service(options, backend, plugin, tools, store, config.tools.max_seconds)


def spawn(*args: str, cwd=None, env: dict | None = None, timeout: float = 120.0, stderr=None):
    """``autagent serve *args`` in a new process on a free loopback port; returns (process, base URL)
    once ``/health`` answers (an integration test's or a benchmark's service).  Its stderr goes to
    ``stderr`` (default: a temporary file, never a pipe nobody reads: a full pipe would stop the
    service mid-run).  Raises RuntimeError with the service's last output if it exits first,
    TimeoutError if it never answers."""
    import os
    import socket
    import subprocess
    import sys
    import tempfile
    import time

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tempfile.TemporaryFile(mode="w+") if stderr is None else None
    process = subprocess.Popen(
        [sys.executable, "-m", "autagent.cli", "serve", "--port", str(port), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stderr=log if log is not None else stderr,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            output = ""
            if log is not None:
                log.seek(0)
                output = log.read()
            raise RuntimeError(f"autagent serve exited: {output[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.3)
    process.terminate()
    raise TimeoutError(f"autagent serve did not answer on {url} within {timeout:g} s")


__all__ = ["ServeOptions", "Service", "build", "create_app", "spawn"]

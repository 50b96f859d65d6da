"""The serving subcommands: ``serve`` (the OpenAI-compatible service), ``upstream start`` (vLLM's CPU build)
and ``mcp`` (the tools as an MCP server)."""

from __future__ import annotations

import os
import sys

from ..data.user_cache import cache_path
from .common import config_of


def cmd_serve(args) -> int:
    import uvicorn

    from ..serve import build, create_app
    from ..serve.connections import uvicorn_config
    from ..serve.options import KEY_ON_COMMAND_LINE, from_args

    config = config_of(args)
    if not args.config and not any(s.startswith("tools.executor=") for s in args.set or []):
        config.tools.executor = "local"  # a service runs its tools in process unless told otherwise
    if args.api_key is not None:
        print(f"autagent serve: {KEY_ON_COMMAND_LINE}", file=sys.stderr, flush=True)
    options = from_args(args)
    options.audio_dir = cache_path(options.audio_dir)  # .cache/serve-audio: the per-user cache's, from any folder
    service = build(config, options)
    options = service.options
    print(
        f"autagent serve: http://{options.host}:{options.port}/v1 ({service.upstream.name}"
        f"{', plugin ' + service.plugin.content_hash[:12] if service.plugin else ''}"
        f"{', clients must present the API key' if options.api_key else ''})",
        file=sys.stderr,
        flush=True,
    )
    app = create_app(service)  # a WebSocket message is refused past the largest realtime event (the SDK's 16 MiB)
    config = uvicorn_config(
        app,
        options.host,
        options.port,
        options.connection_limits(),
        log_config=serve_log_config(),
        access_log=not args.quiet,
        ws_max_size=service.max_event_bytes,
    )
    uvicorn.Server(config).run()
    return 0


def serve_log_config() -> dict:
    """uvicorn's logging for ``serve``: its own messages from warnings up, and one access line per request
    on stderr (``autagent serve: 127.0.0.1:5678 "POST /v1/chat/completions HTTP/1.1" 200``) unless
    ``--quiet``."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["access"]["fmt"] = 'autagent serve: %(client_addr)s "%(request_line)s" %(status_code)s'
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    config["loggers"]["uvicorn"]["level"] = "WARNING"
    config["loggers"]["uvicorn.error"]["level"] = "WARNING"
    return config


def cmd_upstream(args) -> int:
    from ..config import ConfigError
    from ..serve.vllm import VLLMError, start, stop

    extra = args.vllm_args[1:] if args.vllm_args[:1] == ["--"] else args.vllm_args
    try:
        process, url = start(args.model, args.port, extra, args.venv, args.log, args.timeout)
    except VLLMError as err:
        raise ConfigError(str(err)) from None
    print(url, flush=True)
    print(f"autagent upstream: vLLM serves {args.model} (log {process.log_path}); Ctrl-C stops it", file=sys.stderr)
    try:
        return process.wait()
    finally:
        stop(process)


def cmd_mcp(args) -> int:
    from ..serve.mcp_server import McpOptions, serve_mcp
    from ..serve.options import KEY_ON_COMMAND_LINE, LOCAL_HOSTS, read_key_file

    config = config_of(args)
    if not args.config and not any(s.startswith("tools.executor=") for s in args.set or []):
        config.tools.executor = "local"  # like serve: tools in process unless told otherwise
    if args.api_key is not None:
        print(f"autagent mcp: {KEY_ON_COMMAND_LINE}", file=sys.stderr, flush=True)
    api_key = args.api_key or os.environ.get("AUTAGENT_API_KEY") or None
    if args.api_key_file:
        api_key = read_key_file(args.api_key_file)
    options = McpOptions(
        args.transport,
        args.allow_dir or [],
        max_audio_bytes=int(args.max_audio_mb * 2**20),
        api_key=api_key,
        allowed_hosts=args.allowed_hosts or list(LOCAL_HOSTS),
        allowed_origins=args.allowed_origins or [],
    )
    options.audio_dir = cache_path(options.audio_dir)  # .cache/mcp-audio: the per-user cache's, from any folder
    if args.transport == "stdio":  # started by hand it prints nothing else and looked hung
        print(STDIO_NOTICE, file=sys.stderr, flush=True)
    serve_mcp(config, args.plugin, options, args.host, args.port, args.plugin_sha256)
    return 0


STDIO_NOTICE = (
    "autagent mcp: waiting on stdio for an MCP client (an agent that starts this command speaks JSON-RPC on its "
    "stdin and stdout; nothing to type here; Ctrl-C stops it; --transport http serves a port instead)"
)
"""The one line ``autagent mcp`` writes on stderr over stdio (stdout is the protocol's)."""

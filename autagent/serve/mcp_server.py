"""``autagent mcp``: the acoustic tools as a Model Context Protocol server (the official ``mcp`` SDK).

Tools, as any MCP client (an agent, an IDE, a desktop assistant) lists them:

* one per tool of the run's library (a plugin's tools with ``--plugin``), under its id: arguments
  ``audio`` (a file path, a ``data:audio/...;base64,`` URL, or base64 bytes) and an optional window
  ``start``/``end`` in seconds; the result is the tool's record as JSON, the same record
  ``autagent tools run`` prints (same pool, same content-addressed cache);
* ``select``: the plugin's choice of tools and their probabilities for a clip and a question;
* ``list_tools``: every tool served, with its description, its record's shape and whether the plugin
  learned it.

File paths: over stdio the client runs as the user, so any file the user can read; over HTTP only
files inside the folders named with ``--allow-dir`` (links resolved first).  Bad input, a missing
file, a clip no tool can read, a path outside the allowed folders, a payload over the size limit,
gets an MCP error result naming the problem; the server stays up.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from tools import get_tool
from tools.audio import without_paths
from tools.clip_window import Window, WindowError
from tools.decoders import sniff
from tools.pool import ToolPool

from ..api import Plugin
from ..reasoners.messages import (
    DATA_URL,
    FORMATS,
    MIME_FORMATS,
    BadRequest,
    check_choices,
    check_format,
    check_text,
    decode_base64,
    over_limit,
)
from .access import Guard
from .limits import AudioStore, WholeBody
from .options import LOCAL_HOSTS

PATH_LIMIT = 4096
"""An ``audio`` argument longer than this is never a path: base64 bytes."""

AudioArg = Annotated[
    str, Field(description="The clip: a file path, a data:audio/...;base64, URL, or the file's bytes in base64.")
]
StartArg = Annotated[float | None, Field(description="Analyse from this second of the clip (default 0).", ge=0)]
EndArg = Annotated[float | None, Field(description="Analyse up to this second of the clip (default: its end).", ge=0)]


@dataclass
class McpOptions:
    """What ``autagent mcp`` was started with."""

    transport: str = "stdio"
    """``stdio`` (any file the user can read) or ``http`` (streamable HTTP; paths only in ``allow_dirs``)."""
    allow_dirs: list[str] = field(default_factory=list)
    """Over HTTP: folders whose files may be named by path."""
    audio_dir: str = ".cache/mcp-audio"
    """Where clips sent as bytes are kept, named by their content."""
    max_audio_bytes: int = 25 << 20
    """Largest clip accepted as bytes."""
    api_key: str | None = None
    """Over HTTP: the key clients must present (``Authorization: Bearer KEY``); None asks none."""
    audio_cache_bytes: int = 2 << 30
    """The clips folder is kept under this size, least recently used first (clips in use are kept)."""
    allowed_hosts: list[str] = field(default_factory=lambda: list(LOCAL_HOSTS))
    """Over HTTP: Host header values served (DNS rebinding), as ``serve --allowed-hosts``; ``*`` any."""
    allowed_origins: list[str] = field(default_factory=list)
    """Over HTTP: browser origins whose requests are served (none by default), as ``serve``'s."""
    body_timeout_s: float = 30.0
    """Over HTTP: a request's body arrives whole within this many seconds (a 408 otherwise) before the
    server reads it: a half-sent request holds nothing past it."""

    def __post_init__(self):
        if self.transport not in ("stdio", "http"):
            raise ValueError(f"--transport must be stdio or http, got {self.transport!r}")


class AcousticTools:
    """The tools behind the server: the pool, the plugin (optional) and the rules for ``audio``."""

    def __init__(self, pool, plugin, options: McpOptions):
        self.pool, self.plugin, self.options = pool, plugin, options
        self.tool_ids = list(plugin.tools if plugin is not None else pool.tool_ids)
        self.allowed = [Path(d).expanduser().resolve() for d in options.allow_dirs]
        self.lock = threading.Lock()  # the pool, the plugin and their caches: one call at a time
        self.store = AudioStore(options.audio_dir, options.audio_cache_bytes)

    @contextmanager
    def clip(self, audio: str):
        """A readable file holding the clip ``audio`` names or carries (one sent as bytes is held in the
        bounded clips folder until the block ends); BadRequest naming the problem."""
        if not isinstance(audio, str) or not audio.strip():
            raise BadRequest("audio is empty: give a file path, a data: URL or base64 bytes")
        audio = audio.strip()
        if audio.startswith("data:"):
            match = DATA_URL.match(audio)
            if not match:
                raise BadRequest("audio: a data: URL must look like data:audio/<format>;base64,<bytes>")
            stored = self._store(match[2], match[1])
        elif len(audio) <= PATH_LIMIT and (
            audio.startswith(("/", "~", "."))
            or Path(audio).suffix
            # over HTTP what is a path is told by its shape alone: whether a file exists is not an answer
            or (self.options.transport == "stdio" and Path(audio).expanduser().exists())
        ):
            yield self._path(audio)
            return
        else:
            stored = self._store(audio, None)
        try:
            yield str(stored)
        except BaseException:  # refused (no tool could read it, or the request failed): not kept
            self.store.release(stored, drop=True)
            raise
        self.store.release(stored)

    def _path(self, text: str) -> str:
        path = Path(text).expanduser()
        if self.options.transport == "http":
            if not self.allowed:
                raise BadRequest(
                    f"{text}: paths are refused over HTTP unless the server names folders with --allow-dir; "
                    "send the clip as base64 or a data: URL"
                )
            path = path.resolve()  # checked, then opened, with its links resolved: no swap between the two
            if not any(path.is_relative_to(folder) for folder in self.allowed):  # the folders not named
                raise BadRequest(f"{text}: outside the folders this server may read (--allow-dir)")
        if not path.exists():
            raise BadRequest(f"{text}: file not found")
        if not path.is_file():
            raise BadRequest(f"{text}: not a regular file")
        if not os.access(path, os.R_OK):
            raise BadRequest(f"{text}: not readable")
        return str(path)

    def _store(self, data: str, fmt: str | None) -> str:
        limit = self.options.max_audio_bytes
        if len(data) > 4 * (limit // 3 + 1) + 4:  # refused before decoding anything
            raise BadRequest(
                f"audio: the payload is over the {limit}-byte limit (--max-audio-mb {limit / 2**20:g} raises it)"
            )
        try:
            raw = decode_base64(data)
        except BadRequest:
            raise BadRequest("audio is neither a file path, a data: URL nor valid base64") from None

        fmt = MIME_FORMATS.get(fmt.lower(), fmt.lower()) if fmt else None
        if fmt not in FORMATS:  # it names the stored file: only the formats we know, else the bytes say
            found = sniff(raw[:64])
            fmt = found if found in FORMATS else "wav"
        if len(raw) > limit:
            raise BadRequest(f"audio: {over_limit(len(raw), limit)}")
        check_format(raw, fmt)  # a playlist, or bytes that are not the format declared: refused
        return self.store.hold(raw, fmt, limit)

    def run(self, tool_id: str, audio: str, start: float | None, end: float | None) -> dict:
        """The tool's record (BadRequest naming the problem when it cannot be computed)."""
        try:
            window = Window.from_arguments({k: v for k, v in (("start", start), ("end", end)) if v is not None})
        except WindowError as err:
            raise BadRequest(str(err)) from None
        with self.clip(audio) as path, self.lock:
            record = self.pool.run(path, [tool_id], window)[tool_id]
            if "error" in record:  # a clip sent as bytes is "the clip", one named by path keeps the name given
                shown = without_paths(record["error"], path)
                if Path(path).resolve().parent != self.store.folder.resolve():
                    shown = shown.replace("the clip", audio.strip(), 1)
                raise BadRequest(f"{tool_id}: {shown}")
        return record

    def select(self, audio: str, question: str, choices: list[str]) -> dict:
        if self.plugin is None:
            raise BadRequest("select needs a plugin: start the server with --plugin DIR")
        check_text(question, "question")  # before the clip, and before the lock other calls wait on
        check_choices(choices)
        with self.clip(audio) as path, self.lock:
            tools = self.plugin.select(path, question, choices)
            probabilities = self.plugin.probabilities(path, question, choices)
        return {"tools": tools, "probabilities": probabilities, "plugin": self.plugin.content_hash}

    def listing(self) -> list[dict]:
        learned = {t["id"] for t in self.plugin.manifest.get("tools") or []} if self.plugin is not None else None
        return [
            {
                "id": t,
                "label": get_tool(t).label,
                "description": get_tool(t).description,
                "output": get_tool(t).output,
                **({"plugin": "learned" if t in learned else "zero-shot"} if learned is not None else {}),
            }
            for t in self.tool_ids
        ]


def build_server(tools: AcousticTools):
    """The MCP server exposing ``tools`` (an :class:`mcp.server.mcpserver.MCPServer`)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(
        "autagent",
        instructions="Acoustic analysis tools for audio clips (AuTAgent). Each tool takes the clip as a file "
        "path, a data: URL or base64, and optionally a window in seconds; `select` says which tools a trained "
        "plugin would call for a question.",
    )

    def guarded(function, *args):
        try:
            return function(*args)
        except BadRequest as err:
            raise ToolError(str(err)) from None

    def tool_function(tool_id: str):
        def run(audio: AudioArg, start: StartArg = None, end: EndArg = None) -> dict[str, Any]:
            return guarded(tools.run, tool_id, audio, start, end)

        return run

    for tool_id in tools.tool_ids:
        spec = get_tool(tool_id)
        description = f"{spec.description.strip()} Returns the tool's record: {{tool, output: {spec.output}, ...}}."
        server.add_tool(tool_function(tool_id), name=tool_id, description=description)

    def select(
        audio: AudioArg,
        question: Annotated[str, Field(description="The question asked about the clip.")],
        choices: Annotated[list[str], Field(description="Its answer choices, if any.")] = [],  # noqa: B006
    ) -> dict[str, Any]:
        return guarded(tools.select, audio, question, list(choices))

    def list_tools() -> dict[str, Any]:
        return {"tools": tools.listing()}

    server.add_tool(
        select,
        name="select",
        description="The plugin's choice of tools (and each tool's probability) for a clip and a question.",
    )
    server.add_tool(list_tools, name="list_tools", description="The acoustic tools this server runs.")
    return server


def serve_mcp(config, plugin_dir: str | None, options: McpOptions, host: str, port: int, sha256=None) -> None:
    """Run the server on ``options.transport`` until interrupted."""
    tools = open_tools(config, plugin_dir, options, sha256)
    server = build_server(tools)
    if options.transport == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        # lazy: it imports uvicorn, which this module does not need otherwise
        from .connections import uvicorn_config

        uvicorn.Server(uvicorn_config(http_app(server, options, host), host, port, log_level="warning")).run()


def http_app(server, options: McpOptions, host: str = "127.0.0.1"):
    """The server over streamable HTTP behind the service's access checks (:mod:`.access`): the API
        key, the Host header among ``allowed_hosts`` and any ``Origin`` among ``allowed_origins``, on
        every address (the SDK checks Host and Origin only when bound to loopback), each body whole within
    ``body_timeout_s`` before the SDK reads it (:class:`.limits.WholeBody`)."""
    limit = 2 * options.max_audio_bytes + (1 << 20)  # base64 plus the message: ours is the clear refusal
    app = WholeBody(server.streamable_http_app(max_request_body_size=limit, host=host), limit, options.body_timeout_s)
    return Guard(app, options.api_key, options.allowed_hosts, options.allowed_origins, http_origins=True)


def open_tools(config, plugin_dir, options: McpOptions, sha256=None) -> AcousticTools:
    """The pool (the plugin's tools when one is given) and the plugin behind the server."""
    plugin = None
    if plugin_dir is not None:
        plugin = Plugin.load(plugin_dir, sha256, tools=config.tools, audio_dir=options.audio_dir)
        return AcousticTools(plugin.pool, plugin, options)
    return AcousticTools(ToolPool(config.tools), None, options)

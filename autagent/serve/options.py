"""``autagent serve``'s settings: one documented field per setting, from which the command's flags are
made (:func:`add_flags`, :func:`from_args`), so a setting is declared once, with its default and its
help, and the service, the command line and the tests read the same field.

A field's flag is ``--field-name`` unless its metadata names another (``flag``); ``unit`` scales the
flag's value into the field's (``--max-audio-mb`` into bytes); ``env`` names an environment variable
read when the flag is not given (never printed)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import os
from dataclasses import dataclass, field

from ..config import ConfigError

MIB = 1 << 20
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")


def setting(default, **meta):
    """A field with its flag's metadata (``flag``, ``unit``, ``type``, ``choices``, ``env``, ``many``)."""
    if isinstance(default, list | tuple):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class ServeOptions:
    """What ``autagent serve`` was started with: every flag, and nothing that is not one."""

    host: str = "127.0.0.1"
    """The address to listen on (the default: this machine only)."""
    port: int = 8000
    """The port to listen on."""
    reasoner: str | None = setting(None, choices=["embedded", "qwen2-audio", "cascade", "scripted"])
    """Answer with this reasoner in process (scripted: the embedded one behind a scripted tool caller)."""
    upstream: str | None = setting(None, metavar="URL")
    """Forward to this OpenAI-compatible server (…/v1)."""
    model: str | None = None
    """The model name sent upstream (default: the client's)."""
    api_key_env: str = "OPENAI_API_KEY"
    """The upstream's key is read from this variable."""
    api_key: str | None = setting(None, env="AUTAGENT_API_KEY", metavar="KEY")
    """The key clients must present (``Authorization: Bearer KEY``) on HTTP and /v1/realtime; default
    the AUTAGENT_API_KEY variable (or --api-key-file); none: no key asked (a loopback service for one
    user).  On the command line it is readable by every local user (the process's arguments)."""
    api_key_file: str | None = setting(None, metavar="FILE")
    """Read the clients' key from this file (its first line), not from the command line."""
    allowed_hosts: list = setting(list(LOCAL_HOSTS), many=True, metavar="HOST")
    """Host header values served (DNS rebinding); ``*`` serves any.  A service put on another address
    names the names it is reached by."""
    allowed_origins: list = setting([], many=True, metavar="ORIGIN")
    """Browser origins (``https://app.example``) allowed to open /v1/realtime; a WebSocket with another
    Origin is refused (a web page reaching a local service); ``*`` allows any."""
    plugin: str | None = None
    """A trained plugin applied to every request."""
    plugin_sha256: str | None = setting(None, metavar="HEX")
    """Refuse the plugin unless its content hash is HEX."""
    max_tools: int | None = setting(None, type=int, metavar="K")
    """The dial: call at most K tools per request, the plugin's most probable first (default: every tool its
    threshold calls)."""
    latency_budget_ms: float | None = setting(None, type=float, metavar="MS")
    """The dial: call tools, most probable first, while their seconds measured at export (summed) fit in MS."""
    tools: int | None = setting(None, type=int, metavar="K")
    """The dial: call exactly the plugin's K most probable tools per request (default: its certified point,
    else its threshold)."""
    uncertified: bool = False
    """Use the plugin's trained threshold even where ``autagent adapt --certify`` gave it a certified point."""
    allow_remote_audio: bool = False
    """Fetch http(s) audio URLs (refused otherwise)."""
    allow_private_audio_hosts: bool = False
    """Let remote audio (and its redirects) come from private, loopback or link-local addresses."""
    remote_timeout_s: float = 30.0
    """A remote clip is fetched within this many seconds, whole (redirects included), or refused."""
    max_concurrency: int = 8
    """Requests handled at once."""
    max_queue: int = 32
    """Requests waiting beyond those; more get a 429."""
    max_audio_bytes: int = setting(25 * MIB, flag="--max-audio-mb", unit=MIB, type=float)
    """Largest clip accepted (MiB)."""
    max_audio_seconds: float | None = setting(None, type=float)
    """Longest clip accepted, and the cap of a /v1/realtime session's audio buffer (default:
    tools.max_seconds, 30 s, what the tools hear; above it a reply says how much they heard)."""
    max_realtime_sessions: int = 8
    """/v1/realtime sessions at once, their tool work included until it stops; more are told so and closed."""
    realtime_idle_s: float = 300.0
    """A realtime session that sends nothing for this long is closed."""
    header_timeout_s: float = 10.0
    """A request's headers must arrive whole within this many seconds of its connection (or of the
    previous response); else the connection is closed (before any key is checked)."""
    keep_alive_s: int = 5
    """An idle keep-alive connection is closed after this many seconds."""
    max_connections: int = 1024
    """Connections open at once (fewer when the file-descriptor limit is lower); one past it is closed
    as soon as it is accepted."""
    body_timeout_s: float = 60.0
    """A request body must arrive whole within this many seconds (a 408 otherwise): a slowly dripped
    body does not hold a slot."""
    request_timeout_s: float = 300.0
    """A request ends within this many seconds of its first byte read: its body, tools, upstream answers
    (with --agentic, every round) and last byte sent (a 504; a stream is cut)."""
    audio_dir: str = ".cache/serve-audio"
    """The clips folder (one service per folder)."""
    audio_cache_bytes: int = setting(2048 * MIB, flag="--audio-cache-mb", unit=MIB, type=float)
    """The clips folder is kept under this size (MiB), least recently used first (clips in use are kept)."""
    warm_up: bool = False
    """Load and run every tool once before serving."""
    upstream_timeout_s: float = setting(120.0, flag="--upstream-timeout")
    """Seconds per upstream request, each try whole: from its first byte sent to the reply's last read."""
    max_upstream_reply_bytes: int = setting(16 * MIB, flag="--max-upstream-reply-mb", unit=MIB, type=float)
    """An upstream's reply, or a line of a streamed one, is read up to this size (MiB); past it, a 502."""
    upstream_retries: int = 2
    """Retries of a failed upstream request."""
    upstream_audio: str = setting("send", choices=["send", "drop"])
    """send: the clip goes upstream with the tool records (an audio model); drop: only the records and the
    text go (a text-only model: the cascaded voice agent); /v1/realtime likewise."""
    upstream_sample_rate: int = 16000
    """Clips go upstream at this rate (Hz; 0: as they came): the rate the upstream audio model reads
    (Qwen2-Audio's 16 kHz), which vLLM's CPU build cannot resample to itself."""
    request_log: str | None = setting(None, metavar="FILE")
    """Append each chat request's time, model and last user text (no audio, no header) as a JSON line."""
    agentic: bool = False
    """Offer the tools not selected as function tools (the upstream may ask for them)."""
    max_tool_rounds: int = 3
    """With --agentic: rounds of tool calls at most per request."""
    max_tool_calls: int = 8
    """With --agentic: tool calls of ours run per round at most; the rest are answered as refused."""
    extra_workers: int = 4
    """Worker threads beyond --max-concurrency and the realtime sessions (the rest of the service's work)."""
    max_memory_answers: int = 100_000
    """A reasoner in process keeps at most this many answers in memory (the rest on disk)."""

    def __post_init__(self):
        if self.api_key_file:
            self.api_key = read_key_file(self.api_key_file)

        for name in ("max_concurrency", "max_realtime_sessions", "max_tool_calls", "extra_workers", "max_connections"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("max_queue", "max_tool_rounds", "upstream_retries"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.upstream_sample_rate and not 8000 <= self.upstream_sample_rate <= 48000:
            raise ConfigError(f"--upstream-sample-rate must be 0 or in [8000, 48000], got {self.upstream_sample_rate}")
        for name in (
            "body_timeout_s",
            "request_timeout_s",
            "remote_timeout_s",
            "realtime_idle_s",
            "header_timeout_s",
            "keep_alive_s",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be > 0, got {getattr(self, name)}")

    def connection_limits(self):
        """The :class:`~.connections.ConnectionLimits` these settings give."""
        # lazy: it imports uvicorn, which this module does not need otherwise
        from .connections import ConnectionLimits

        return ConnectionLimits(self.header_timeout_s, self.keep_alive_s, self.max_connections)


def read_key_file(path: str) -> str:
    """The key in ``path``'s first line; a clear error for a missing or empty file (never the key)."""
    try:
        lines = open(path, encoding="utf-8").read().splitlines()  # noqa: SIM115 - a short file
    except (OSError, UnicodeError) as err:
        raise ConfigError(f"--api-key-file {path}: cannot read it ({type(err).__name__})") from None
    key = lines[0].strip() if lines else ""
    if not key:
        raise ConfigError(f"--api-key-file {path}: the file is empty")
    return key


KEY_ON_COMMAND_LINE = (
    "warning: --api-key on the command line is readable by every local user (ps, /proc/PID/cmdline); "
    "give it in AUTAGENT_API_KEY or --api-key-file instead"
)


@functools.cache
def field_docs(cls) -> dict[str, str]:
    """Each field's docstring (the string literal under it in the class body)."""
    body = ast.parse(inspect.getsource(cls)).body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs


def _flag(item: dataclasses.Field) -> str:
    return item.metadata.get("flag", "--" + item.name.replace("_", "-"))


def add_flags(parser: argparse.ArgumentParser, cls=ServeOptions) -> None:
    """One flag per field of ``cls``, its help the field's docstring (with the default)."""
    docs = field_docs(cls)
    for item in dataclasses.fields(cls):
        meta = item.metadata
        default = item.default if item.default is not dataclasses.MISSING else item.default_factory()
        unit = meta.get("unit", 1)
        shown = default / unit if unit != 1 and default is not None else default
        text = docs.get(item.name, "")
        if shown not in (None, False, []):
            words = " ".join(shown) if isinstance(shown, list) else f"{shown:g}" if isinstance(shown, float) else shown
            text += f" (default {words})"
        kwargs = {"dest": item.name, "help": text.replace("%", "%%"), "default": None}
        if "metavar" in meta or "unit" in meta:
            kwargs["metavar"] = meta.get("metavar", "MB")
        if isinstance(default, bool):
            kwargs["action"] = "store_true"
        elif meta.get("many"):
            kwargs["nargs"] = "+"
        else:
            kwargs["type"] = meta.get("type") or (type(default) if default is not None else str)
            if "choices" in meta:
                kwargs["choices"] = meta["choices"]
        parser.add_argument(_flag(item), **kwargs)


def from_args(args: argparse.Namespace, cls=ServeOptions):
    """The options the parsed flags give (a flag not given: its variable, else the field's default)."""
    values = {}
    for item in dataclasses.fields(cls):
        value = getattr(args, item.name, None)
        if value is False:
            value = None
        if value is None and item.metadata.get("env"):
            value = os.environ.get(item.metadata["env"]) or None
        if value is None:
            continue
        unit = item.metadata.get("unit")
        values[item.name] = int(value * unit) if unit else value
    return cls(**values)

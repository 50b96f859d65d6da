"""The connections ``autagent serve`` and ``autagent mcp`` keep open, bounded before any key is
checked: uvicorn alone times out neither a connection that never finishes its headers nor one that
never sends a byte (200 of each were still open after 65 s), caps no connections, and, once the
process is out of file descriptors, asyncio logs a traceback per failed accept (80 MB in 20 s).

* A request's headers must arrive whole within ``header_timeout_s`` of the connection (or of the
  previous response); else the connection is closed.  A body has its own deadline
  (``--body-timeout-s``, read by the service).
* An idle keep-alive connection is closed after ``keep_alive_s``.
* At most ``max_connections`` at once (kept under the process's file-descriptor limit); one past
  it is closed as soon as it is accepted, and uvicorn answers 503 to requests past
  ``limit_concurrency``.
* Headers are at most ``max_header_bytes`` (h11's incomplete-event limit: a 400 past it).
* "Too many open files" is logged once a minute with the count, not once per accept."""

from __future__ import annotations

import errno
import logging
import time
from dataclasses import dataclass

from uvicorn.protocols.http.h11_impl import H11Protocol

FD_RESERVE = 128
"""File descriptors kept for the service's own work (clips, caches, models, threads' pipes)."""


@dataclass
class ConnectionLimits:
    """How long a connection may take and how many may be open."""

    header_timeout_s: float = 10.0
    """A request's headers arrive whole within this (from the connection, or the previous response)."""
    keep_alive_s: int = 5
    """An idle keep-alive connection is closed after this."""
    max_connections: int = 1024
    """Open connections at most (less when the file-descriptor limit is lower)."""
    max_header_bytes: int = 16 << 10
    """A request's line and headers at most."""

    def __post_init__(self):
        if not self.header_timeout_s > 0 or self.keep_alive_s < 1 or self.max_connections < 1:
            raise ValueError("header_timeout_s > 0, keep_alive_s >= 1 and max_connections >= 1")

    def connection_cap(self) -> int:
        """``max_connections``, lowered to fit the process's file descriptors less :data:`FD_RESERVE`."""
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(1, min(self.max_connections, soft - FD_RESERVE))


def protocol_class(limits: ConnectionLimits, cap: int):
    """An h11 protocol (uvicorn's) with the header deadline and the connection cap of ``limits``."""

    class Bounded(H11Protocol):
        deadline = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > cap:  # past the cap: its file descriptor given back at once
                transport.abort()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._busy():
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _busy(self) -> bool:
            """A request is being answered, or the connection is now a WebSocket's."""
            upgraded = self.transport.get_protocol() is not self
            return upgraded or (self.cycle is not None and not self.cycle.response_complete)

        def _arm(self) -> None:
            self._disarm()
            self.deadline = self.loop.call_later(limits.header_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def _expire(self) -> None:
            self.deadline = None
            if not self._busy() and not self.transport.is_closing():
                self.transport.close()

    return Bounded


def uvicorn_config(app, host: str, port: int, limits: ConnectionLimits | None = None, **settings):
    """uvicorn's config for ``app`` with ``limits`` (the defaults when None), the EMFILE log bounded."""
    import uvicorn

    limits = limits or ConnectionLimits()
    cap = limits.connection_cap()
    quiet_emfile()
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_class(limits, cap),
        timeout_keep_alive=limits.keep_alive_s,
        limit_concurrency=cap + 1,  # past the cap a connection is closed; uvicorn's 503 counts its tasks
        h11_max_incomplete_event_size=limits.max_header_bytes,
        **settings,
    )


class OnceAMinute(logging.Filter):
    """Lets one "too many open files" record through a minute, with how many were held back."""

    def __init__(self, period_s: float = 60.0):
        super().__init__()
        self.period_s, self.last, self.held = period_s, -float("inf"), 0

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        if not (isinstance(err, OSError) and err.errno in (errno.EMFILE, errno.ENFILE)):
            return True
        now = time.monotonic()
        if now - self.last < self.period_s:
            self.held += 1
            return False
        if self.held:
            record.msg = f"{record.msg} ({self.held} more like it in the last minute, not logged)"
        self.last, self.held = now, 0
        record.exc_info, record.exc_text = None, None
        record.msg = f"{record.msg}: out of file descriptors ({err.strerror})"
        return True


def quiet_emfile() -> None:
    """The :class:`OnceAMinute` filter on asyncio's logger (installed once)."""
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, OnceAMinute) for f in logger.filters):
        logger.addFilter(OnceAMinute())

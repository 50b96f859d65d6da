"""Connections are bounded before any key is checked (issue 49): a connection that never finishes its
headers, or never sends a byte, is closed at its deadline; connections past the cap are closed as
they come and the service answers again once they go; "too many open files" is logged once a
minute, not once per accept.  Every test here fails on 2e698d3."""

from __future__ import annotations

import errno
import logging
import socket
import time

import httpx
import pytest
from fastapi import FastAPI
from helpers.serve import InThread

from autagent.serve.connections import ConnectionLimits


@pytest.fixture
def app():
    app = FastAPI()

    @app.get("/health")
    async def health():
        return {"ok": True}

    return app


def _closed(sock: socket.socket, within: float) -> bool:
    """Whether the server closed ``sock`` within ``within`` seconds (whatever it sent first)."""
    deadline = time.time() + within
    try:
        while True:
            sock.settimeout(max(0.01, deadline - time.time()))
            if sock.recv(4096) == b"":
                return True
    except TimeoutError:
        return False
    except OSError:
        return True


def test_half_open_and_silent_connections_are_closed_at_the_header_deadline(app):
    server = InThread(app, ConnectionLimits(header_timeout_s=1.0, keep_alive_s=1))
    host, port = server.url.split("//")[1].split(":")
    try:
        partial = [socket.create_connection((host, int(port))) for _ in range(10)]
        for sock in partial:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        silent = [socket.create_connection((host, int(port))) for _ in range(10)]
        assert httpx.get(server.url + "/health", timeout=2).status_code == 200
        started = time.time()
        assert all(_closed(s, 4.0) for s in partial + silent)
        assert time.time() - started < 4.0
        served = socket.create_connection((host, int(port)))  # after a response: idle, then closed too
        served.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        served.settimeout(3)
        assert served.recv(1000).startswith(b"HTTP/1.1 200")
        assert _closed(served, 3.0)
    finally:
        server.stop()


def test_connections_past_the_cap_are_closed_and_the_service_answers_once_they_go(app):
    server = InThread(app, ConnectionLimits(header_timeout_s=1.0, max_connections=8))
    host, port = server.url.split("//")[1].split(":")
    try:
        held = [socket.create_connection((host, int(port))) for _ in range(20)]
        time.sleep(0.3)
        refused = 0
        for sock in held:
            sock.settimeout(0.05)
            try:
                refused += sock.recv(10) == b""
            except TimeoutError:
                pass
            except OSError:
                refused += 1
        assert refused >= 12
        time.sleep(1.5)  # the held ones pass their header deadline
        assert httpx.get(server.url + "/health", timeout=2).status_code == 200
    finally:
        server.stop()


def test_too_many_open_files_is_logged_once_a_minute_not_per_accept():
    from autagent.serve.connections import quiet_emfile

    quiet_emfile()
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger, handler = logging.getLogger("asyncio"), Keep()
    logger.addHandler(handler)
    try:
        for _ in range(1000):
            try:
                raise OSError(errno.EMFILE, "Too many open files")
            except OSError:
                logger.error("socket.accept() out of system resource", exc_info=True)
        logger.error("something else")
    finally:
        logger.removeHandler(handler)
    assert len(records) == 2 and records[0].exc_info is None and "out of file descriptors" in records[0].getMessage()

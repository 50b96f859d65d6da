"""``autagent serve`` in a child process on a free loopback port, for integration tests and benchmarks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time


def spawn(*args: str, cwd=None, env: dict | None = None, timeout: float = 120.0, stderr=None):
    """``autagent serve *args`` in a new process on a free loopback port; returns (process, base URL)
    once ``/health`` answers (an integration test's or a benchmark's service).  Its stderr goes to
    ``stderr`` (default: a temporary file, never a pipe nobody reads: a full pipe would stop the
    service mid-run).  Raises RuntimeError with the service's last output if it exits first,
    TimeoutError if it never answers."""
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

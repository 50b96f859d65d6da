"""Quiet by default: W&B writes its offline run under the run's own folder (``eval --out DIR``: DIR) and
says where in one line, without its own ~35 lines; Ray starts without inviting users to turn its
authentication off; ``serve`` logs one access line per request (``--quiet``: none)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import yaml

from autagent.cli import main


def test_eval_writes_its_wandb_run_under_out_and_says_where_in_one_line(
    tiny_bench, tmp_path, monkeypatch, capfd, caplog
):
    monkeypatch.setenv("WANDB_MODE", "offline")  # the suite runs with W&B disabled; a user's default is offline
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("WANDB_DISABLE_WEAVE", raising=False)
    import openai  # noqa: F401  (as the openai reasoner and the service import it: W&B then advertises Weave)

    config = tmp_path / "eval.yaml"
    tools = {"executor": "local", "cache_dir": str(tiny_bench["cache"]), "enabled": list(tiny_bench["tools"])}
    config.write_text(
        yaml.safe_dump(
            {
                "name": "quiet",
                "output_dir": str(tmp_path / "runs"),
                "answer_cache_dir": str(tmp_path / "answers"),
                "data": {"test": str(tiny_bench["paths"]["test"]), "limit_test": 3},
                "tools": tools,
                "eval": {"methods": ["no_tool"], "plots": False},
                "logging": {"wandb": True, "progress": False},
            }
        )
    )
    out = tmp_path / "out"
    with caplog.at_level(logging.INFO, logger="autagent"):
        assert main(["eval", "--config", str(config), "--out", str(out)]) == 0
    err = capfd.readouterr().err
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and not (tmp_path / "runs" / "quiet" / "wandb").exists()
    assert [line for line in err.splitlines() if line.startswith("wandb:")] == []
    said = [r.getMessage() for r in caplog.records if "W&B" in r.getMessage()]
    assert said == [f"W&B run (offline): {runs[0]}"]  # (autagent's log lines read "autagent: ...")


def test_rays_auth_notice_is_dropped_and_its_other_warnings_kept(caplog, monkeypatch):
    """Only the notice that invites ``RAY_AUTH_MODE=disabled``; token authentication itself stays Ray's
    default (nothing of ours sets the mode: Ray's own ``ray.init`` in an earlier test of this process may have)."""
    import os

    from tools.pool import _quiet_auth_notice

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    _quiet_auth_notice()
    _quiet_auth_notice()  # one filter, however often Ray is started
    auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    assert sum(getattr(f, "autagent", False) for f in auth_log.filters) == 1
    with caplog.at_level(logging.WARNING, logger=auth_log.name):
        auth_log.warning("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled ...")
        auth_log.warning("Token authentication is disabled for this Ray cluster. Anyone with network access ...")
    assert [r.getMessage()[:40] for r in caplog.records] == ["Token authentication is disabled for thi"]
    assert "RAY_AUTH_MODE" not in os.environ


@pytest.mark.parametrize("quiet", [False, True])
def test_serve_logs_one_access_line_per_request_unless_quiet(quiet, capfd):
    import httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from autagent.cli import build_parser
    from autagent.cli.serving import serve_log_config

    assert build_parser().parse_args(["serve", "--quiet"]).quiet
    app = Starlette(routes=[Route("/health", lambda request: JSONResponse({"ok": True}))])
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=serve_log_config(), access_log=not quiet)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        for _ in range(2):
            assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    finally:
        server.should_exit = True
        thread.join(10)
    out, err = capfd.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("autagent serve: ")]
    assert out == "" and "Started server process" not in err and "Uvicorn running" not in err
    assert len(lines) == (0 if quiet else 2)
    assert all(line.endswith('"GET /health HTTP/1.1" 200 OK') for line in lines)

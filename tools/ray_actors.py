"""The pool's Ray side: the actor that holds one tool's loaded model, and Ray's token notice kept quiet."""

from __future__ import annotations

import os

from . import ToolRunner
from .numba_cache import warm_librosa
from .registry import ensure_loaded


def _actor_class():
    import ray

    @ray.remote
    class ToolActor:
        """Holds one tool's loaded model for the life of the actor (Ray restarts it if it dies)."""

        def __init__(self, tool_id: str, profile: str, settings: dict, max_seconds: float, extra: list, warm: bool):
            os.environ.setdefault("OMP_NUM_THREADS", "1")
            if warm:  # on another node of a cluster, whose librosa cache the driver did not fill
                warm_librosa()
            ensure_loaded(extra)
            self.tool_id = tool_id
            self.runner = ToolRunner(profile, settings, max_seconds)

        def run_batch(self, paths: list[str]) -> list[dict]:
            return self.runner.run_batch(self.tool_id, paths)

        def pid(self) -> int:
            return os.getpid()

        def node_id(self) -> str:
            return ray.get_runtime_context().get_node_id()

    return ToolActor


AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"


def _quiet_auth_notice() -> None:
    """Token authentication stays on (Ray's default for a new local cluster); only its notice, which
    invites users to set ``RAY_AUTH_MODE=disabled``, is not shown (every other Ray warning is)."""
    import logging

    auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if not any(getattr(f, "autagent", False) for f in auth_log.filters):
        notice = logging.Filter()
        notice.filter = lambda record: not record.getMessage().startswith(AUTH_NOTICE)
        notice.autagent = True
        auth_log.addFilter(notice)

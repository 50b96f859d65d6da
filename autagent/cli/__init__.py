"""``autagent`` command line: every subcommand (``autagent --help`` lists them).

Every error a user can cause (a bad config, dataset, clip, plugin or key) ends in one line
``autagent: error: ...`` naming the file, row or field, and exit code 2; never a traceback.

The package's own modules are imported inside each subcommand, not here: most of them pull torch, Ray or
transformers, and ``autagent --help``, a bad ``--set`` or ``autagent select`` on a clip that is not audio
should answer in a fraction of a second, before any of those load (``tests/test_cli_quiet.py``).

Here: :func:`main` and the errors a user causes; :mod:`.parser` the subcommands' flags (:mod:`.flags` those
several share), :mod:`.commands` the subcommands that make and measure a plugin, :mod:`.plugins` those that
use one, :mod:`.serving` those that serve, :mod:`.common` what they share.
"""

from __future__ import annotations

import logging
import os
import sys

from .common import overrides
from .parser import build_parser

__all__ = ["build_parser", "main", "overrides"]


def _quiet_environment() -> None:
    for key, value in {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "RAY_USAGE_STATS_ENABLED": "0",
        "TOKENIZERS_PARALLELISM": "false",
        "PYANNOTE_METRICS_ENABLED": "0",
    }.items():
        os.environ.setdefault(key, value)
    import warnings

    warnings.filterwarnings("ignore", message="pkg_resources is deprecated")
    logging.basicConfig(level=logging.INFO, format="autagent: %(message)s", stream=sys.stderr)
    from ..data.progress import keep_logs_off_bars

    keep_logs_off_bars()  # a log line clears a live progress bar first; faster-whisper's per-clip INFO quiet
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar for every model load
    for noisy in ("httpx", "httpx2", "ray", "urllib3", "filelock", "numba", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


USER_ERRORS = (
    ("autagent.config", "ConfigError"),
    ("autagent.data.loaders", "DatasetError"),
    ("autagent.oneoff", "UsageError"),
    ("autagent.plugin.trust", "PluginError"),
    ("autagent.policies.router.crossval", "CrossValidationError"),
    ("autagent.policies.router.table", "BudgetError"),
    ("autagent.reasoners.base", "ReasonerFailing"),
    ("tools.audio", "AudioError"),
    ("tools.registry", "ToolRegistryError"),
)
"""The errors a user causes, by module: looked up only in the modules a command imported, so a command
that fails on its input (a missing clip) has imported nothing heavy (torch, Ray) by then."""


def _user_error(err: BaseException) -> bool:
    classes = [getattr(sys.modules[module], name) for module, name in USER_ERRORS if module in sys.modules]
    return isinstance(err, (*classes, FileExistsError, FileNotFoundError))


def main(argv: list[str] | None = None) -> int:
    _quiet_environment()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("autagent: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if _user_error(err):
            print(f"autagent: error: {err}", file=sys.stderr)
            return 2
        if isinstance(err, OSError):  # a full disk, a permission: say what and where, keep what was written
            print(f"autagent: error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
            return 2
        raise

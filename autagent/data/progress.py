"""Progress bars that stay readable in logs: live on a terminal, a line every 10 s otherwise; and log lines
that never land inside a bar.

Why the second: a bar is redrawn in place (a carriage return, no newline), so a log line written while one is
drawn was glued to its end (``tools:   0%|   | 0/54 [00:00<?, ?call/s]autagent: VAD filter removed ...``).
:func:`keep_logs_off_bars` makes the command line's log handler write through ``tqdm.write`` while a bar is
live (the bar cleared, the line written, the bar drawn again below it), and quiets the third-party loggers
that speak at INFO for every clip (faster-whisper: "Processing audio with duration", "VAD filter removed").
"""

from __future__ import annotations

import logging
import sys

QUIET_BELOW_WARNING = ("faster_whisper",)
"""Third-party loggers whose INFO lines say nothing a user acts on (one or two per clip); warnings still show."""


def progress(*args, **kwargs):
    from tqdm.auto import tqdm

    if not sys.stderr.isatty():
        kwargs.setdefault("mininterval", 10.0)
    return tqdm(*args, **kwargs)


class BarSafeHandler(logging.StreamHandler):
    """A stream handler that, while a tqdm bar is drawn, writes its line through ``tqdm.write`` (which clears
    the bars, writes the line and draws them again) instead of after the bar's last character."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)  # no bar can be live before tqdm is imported
        if tqdm is not None and getattr(tqdm, "_instances", None):
            try:
                tqdm.write(self.format(record), file=self.stream)
            except Exception:  # noqa: BLE001 - logging must never raise; logging's own report of it
                self.handleError(record)
            return
        super().emit(record)


def keep_logs_off_bars(logger: logging.Logger | None = None) -> None:
    """Make ``logger``'s (default: the root's) stderr handlers :class:`BarSafeHandler` s, keeping their level
    and format, and quiet :data:`QUIET_BELOW_WARNING` below WARNING.  Idempotent."""
    logger = logger or logging.getLogger()
    for i, handler in enumerate(list(logger.handlers)):
        if type(handler) is logging.StreamHandler and handler.stream in (sys.stderr, sys.__stderr__):
            safe = BarSafeHandler(handler.stream)
            safe.setLevel(handler.level)
            safe.setFormatter(handler.formatter)
            for item in handler.filters:
                safe.addFilter(item)
            logger.handlers[i] = safe
    for name in QUIET_BELOW_WARNING:
        logging.getLogger(name).setLevel(logging.WARNING)

"""Progress bars that stay readable in logs: live on a terminal, a line every 10 s otherwise."""

from __future__ import annotations

import sys


def progress(*args, **kwargs):
    from tqdm.auto import tqdm

    if not sys.stderr.isatty():
        kwargs.setdefault("mininterval", 10.0)
    return tqdm(*args, **kwargs)

"""Where caches live: one per-user folder, shared by every command wherever it runs.

Why: caches once sat under the working directory (``.cache/...``), so a command run from another folder
made them again (``answer --reasoner cascade`` converted Gemma 3 again: 52 s and another 785 MB; the tools'
records and the reasoner's answers were computed again too).

The folder: ``$AUTAGENT_CACHE_DIR`` (``--cache-dir`` sets it for one command), else
``$XDG_CACHE_HOME/autagent``, else ``~/.cache/autagent``.  A cache path that starts with ``.cache/`` (every
default: ``.cache/tools``, ``.cache/answers``, ``.cache/cascade`` ..., and the ``experiments/`` configs,
which name the same) is a name under that folder, wherever the command runs; an absolute path, or another
relative one (``--set tools.cache_dir=mine``), is the user's own and is left as given.  A run's recorded
config keeps the ``.cache/...`` form (:func:`portable`), so a plugin's training config names no one's home.

The tests' fixtures (``.cache/tests`` in the checkout) are not under this folder: the test helpers find
them by their own file's path, never by the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "AUTAGENT_CACHE_DIR"
"""The variable that names the cache folder (``--cache-dir`` sets it)."""
PREFIX = ".cache/"
"""A cache path starting with this is a name under :func:`cache_root`."""


def cache_root() -> Path:
    """``$AUTAGENT_CACHE_DIR``, else ``$XDG_CACHE_HOME/autagent``, else ``~/.cache/autagent`` (absolute;
    read at every call, so ``--cache-dir`` set once in ``main`` reaches every config built after)."""
    named = os.environ.get(ENV, "").strip()
    if named:
        return Path(named).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg and Path(xdg).expanduser().is_absolute() else Path.home() / ".cache"
    return (base / "autagent").resolve()


def cache_path(path: str | Path) -> str:
    """``path`` where it lives: ``.cache/NAME`` -> ``<cache_root()>/NAME``; ``~`` expanded; any other
    path as given."""
    text = str(path)
    if text == PREFIX.rstrip("/") or text.startswith(PREFIX):
        return str(cache_root() / text[len(PREFIX) :])
    return os.path.expanduser(text) if text.startswith("~") else text


def portable(path: str | Path) -> str:
    """The inverse of :func:`cache_path` for recording: a path under :func:`cache_root` as ``.cache/NAME``
    (a config written into a run folder or a plugin names no one's home); any other path as given."""
    text = str(path)
    try:
        rest = Path(text).relative_to(cache_root())
    except ValueError:
        return text
    return PREFIX + rest.as_posix() if rest.parts else PREFIX.rstrip("/")

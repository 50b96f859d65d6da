"""MMAU test-mini as published (a JSON list): ``audio_id``, ``question``, ``choices``, ``answer``, ``task``
(the domain), ``category``; and :func:`write_mmau`, the format the embedded benchmark is written in.

Two choices with the same text (27 rows of test-mini: ``'three'`` twice) are kept as published (see
:mod:`.loaders`), and list-valued ``category`` fields stay lists in ``meta``.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from .rows import choice_row
from .sample import Sample

FIELDS = {"id", "audio_id", "question", "choices", "answer", "task"}
"""The fields a row is read from; the others travel in the sample's ``meta``."""
AUDIO = "audio_id"

row = partial(choice_row, audio=AUDIO, domain="task")
"""One row's sample fields (raises :class:`.rows.RowError` naming the field)."""


def write_mmau(samples: list[Sample], path: str | Path) -> None:
    """Write samples as an MMAU test-mini JSON list with audio paths relative to the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [s.to_mmau(str(path.parent.resolve())) for s in samples]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(path)

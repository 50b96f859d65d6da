"""MMAR as published (a JSON list or JSONL): MMAU's fields, the clip in ``audio_path`` and the domain in
``modality``.  Its last choice is sometimes empty: empty choices are dropped (the row stays scorable if two
remain)."""

from __future__ import annotations

from functools import partial

from .rows import choice_row

FIELDS = {"id", "audio_path", "question", "choices", "answer", "modality"}
"""The fields a row is read from; the others travel in the sample's ``meta``."""
AUDIO = "audio_path"

row = partial(choice_row, audio=AUDIO, domain="modality")
"""One row's sample fields (raises :class:`.rows.RowError` naming the field)."""

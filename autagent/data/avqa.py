"""AVQA as R1-AQA uses it (JSONL): ``audio_path``, ``question_text``, ``multi_choice`` and an integer
``answer`` indexing it; the domain is always ``sound``.  With ``audio_wording`` (``data.audio_wording``) the
question's "video" reads "audio", as R1-AQA asks it."""

from __future__ import annotations

import re
from pathlib import Path

from .rows import RowError, audio_path, choices_field, label_of, text_field

FIELDS = {"id", "audio_path", "question_text", "multi_choice", "answer"}
"""The fields a row is read from; the others travel in the sample's ``meta``."""
AUDIO = "audio_path"


AVQA_WORDING = ((re.compile(r"\bvideos?\b", re.I), lambda m: "audio" if m.group(0).islower() else "Audio"),)


def row(path: Path, row: dict, audio_wording: bool = False) -> dict:
    """One row's sample fields (raises :class:`.rows.RowError` naming the field)."""
    choices = choices_field(row, "multi_choice")
    index = row.get("answer")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(choices):
        raise RowError("answer", f"expected an index in 0..{len(choices) - 1}, got {index!r}")
    question = text_field(row, "question_text")
    if audio_wording:  # r1-aqa asks about "the audio" where AVQA says "the video"
        for pattern, repl in AVQA_WORDING:
            question = pattern.sub(repl, question)
    return dict(
        audio=audio_path(path, text_field(row, "audio_path")),
        question=question,
        choices=choices,
        answer=choices[index],
        domain="sound",
        category=label_of(row.get("question_type")),
    )

"""What the corpus loaders share (:mod:`.mmau`, :mod:`.mmar`, :mod:`.avqa`; :mod:`.loaders` reads a file
with them): the errors, a row's fields read as text, a label, the choices and the answer among them, and
the audio path resolved against the file's folder.  A row's problem is a :class:`RowError` naming its field,
which the loader turns into an unscorable sample; only a file that cannot be read raises
:class:`DatasetError`."""

from __future__ import annotations

import re
from pathlib import Path


class DatasetError(ValueError):
    """A file that cannot be read at all (missing, not JSON, not a list of objects), named with its row and
    field where there is one."""

    def __init__(self, path, row: int | None, field: str | None, reason: str):
        where = f"{path}" + (f", row {row}" if row is not None else "") + (f", field {field!r}" if field else "")
        super().__init__(f"{where}: {reason}")


class RowError(ValueError):
    """A row that cannot be scored, naming its field: the loader keeps it as an unscorable sample."""

    def __init__(self, field: str | None, reason: str):
        self.field, self.reason = field, reason
        super().__init__(f"field {field!r}: {reason}" if field else reason)


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def text_field(row, name, required=True) -> str | None:
    value = row.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise RowError(name, "missing" if value is None else "empty")
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise RowError(name, f"expected text, got {type(value).__name__}")
    return str(value)


def label_of(value) -> str:
    """A metadata field as text: lists joined (the list itself stays in meta), scalars as they are."""
    if isinstance(value, list):
        return " / ".join(str(v) for v in value)
    return "" if value is None else str(value)


def choices_field(row, name) -> tuple[str, ...]:
    raw = row.get(name)
    if not isinstance(raw, list):
        raise RowError(name, "missing" if raw is None else f"expected a list, got {type(raw).__name__}")
    choices = tuple(
        str(c) for c in raw if isinstance(c, (str, int, float)) and not isinstance(c, bool) and str(c).strip()
    )
    if len(choices) < 2:
        raise RowError(name, "needs at least two non-empty choices")
    return choices  # a text listed twice is kept: the answer is its text (:mod:`.loaders`' quirks)


def repeats_a_choice(choices) -> bool:
    """Whether two of ``choices`` have the same text (white space aside)."""
    return len({normalise(c) for c in choices}) < len(choices)


def answer_in(choices, answer: str) -> str:
    if answer in choices:
        return answer
    matches = [c for c in choices if normalise(c) == normalise(answer)]
    if matches:  # one text, however often it is listed
        return matches[0]
    raise RowError("answer", f"{answer[:80]!r} is not one of the choices")


def audio_path(path: Path, value: str) -> str:
    audio = Path(value)
    return str(audio if audio.is_absolute() else (path.parent / audio).resolve())


def choice_row(path: Path, row: dict, audio: str, domain: str) -> dict:
    """A row of MMAU or MMAR, which differ only in the names of the audio and domain fields."""
    choices = choices_field(row, "choices")
    return dict(
        audio=audio_path(path, text_field(row, audio)),
        question=text_field(row, "question"),
        choices=choices,
        answer=answer_in(choices, text_field(row, "answer")),
        domain=label_of(row.get(domain)),
        category=label_of(row.get("category")),
    )

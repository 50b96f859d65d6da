"""Loaders for the benchmark formats: MMAU test-mini (JSON list), MMAR (JSON list or JSONL) and
AVQA as R1-AQA uses it (JSONL, integer ``answer`` indexing ``multi_choice``).

Every malformed row raises :class:`DatasetError` naming the file, the row and the field.  Audio
paths are resolved against the dataset file's folder.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from .sample import Sample


class DatasetError(ValueError):
    def __init__(self, path, row: int | None, field: str | None, reason: str):
        where = f"{path}" + (f", row {row}" if row is not None else "") + (f", field {field!r}" if field else "")
        super().__init__(f"{where}: {reason}")


def read_rows(path: str | Path) -> list[dict]:
    """A JSON list or JSONL file -> list of objects (errors name the line)."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(path, None, None, "file not found")
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            raise DatasetError(path, None, None, f"invalid JSON ({err})") from err
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise DatasetError(path, number, None, f"invalid JSON line ({err.msg})") from err
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DatasetError(path, i, None, f"expected an object, got {type(row).__name__}")
    return rows


def _field(path, i, row, *names, kind=None):
    for name in names:
        if name in row and row[name] is not None:
            value = row[name]
            if kind is not None and not isinstance(value, kind):
                raise DatasetError(path, i, name, f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
            return value
    raise DatasetError(path, i, names[0], "missing")


def _choices(path, i, row, name) -> tuple[str, ...]:
    choices = _field(path, i, row, name, kind=list)
    if len(choices) < 2 or not all(isinstance(c, str) and c.strip() for c in choices):
        raise DatasetError(path, i, name, "needs at least two non-empty strings")
    return tuple(choices)


def _audio(path: Path, value: str) -> str:
    audio = Path(value)
    return str(audio if audio.is_absolute() else (path.parent / audio).resolve())


def _choices_and_answer(path, i, row) -> tuple[tuple[str, ...], str]:
    """MMAU and MMAR: ``choices`` and an ``answer`` that must be one of them, verbatim."""
    choices = _choices(path, i, row, "choices")
    answer = _field(path, i, row, "answer", kind=str)
    if answer not in choices:
        raise DatasetError(path, i, "answer", f"{answer!r} is not one of the choices {list(choices)}")
    return choices, answer


def _mmau_row(path: Path, i: int, row: dict) -> Sample:
    choices, answer = _choices_and_answer(path, i, row)
    known = {"id", "audio_id", "question", "choices", "answer", "task", "category"}
    return Sample(id=str(_field(path, i, row, "id")), audio=_audio(path, _field(path, i, row, "audio_id", kind=str)),
                  question=_field(path, i, row, "question", kind=str), choices=choices, answer=answer,
                  domain=str(row.get("task", "")), category=str(row.get("category", row.get("sub-category", ""))),
                  meta={k: v for k, v in row.items() if k not in known})


def _mmar_row(path: Path, i: int, row: dict) -> Sample:
    choices, answer = _choices_and_answer(path, i, row)
    known = {"id", "audio_path", "question", "choices", "answer", "modality", "category"}
    return Sample(id=str(_field(path, i, row, "id")), audio=_audio(path, _field(path, i, row, "audio_path", kind=str)),
                  question=_field(path, i, row, "question", kind=str), choices=choices, answer=answer,
                  domain=str(row.get("modality", "")), category=str(row.get("category", "")),
                  meta={k: v for k, v in row.items() if k not in known})


def _avqa_row(path: Path, i: int, row: dict) -> Sample:
    choices = _choices(path, i, row, "multi_choice")
    index = _field(path, i, row, "answer")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(choices):
        raise DatasetError(path, i, "answer", f"expected an index in 0..{len(choices) - 1}, got {index!r}")
    known = {"id", "audio_path", "question_text", "multi_choice", "answer", "question_type"}
    return Sample(id=str(_field(path, i, row, "id")), audio=_audio(path, _field(path, i, row, "audio_path", kind=str)),
                  question=_field(path, i, row, "question_text", kind=str), choices=choices, answer=choices[index],
                  domain="sound", category=str(row.get("question_type", "")),
                  meta={k: v for k, v in row.items() if k not in known})


FORMATS: dict[str, Callable[[Path, int, dict], Sample]] = {"mmau": _mmau_row, "mmar": _mmar_row, "avqa": _avqa_row}


def detect_format(row: dict) -> str:
    if "multi_choice" in row:
        return "avqa"
    if "audio_path" in row:
        return "mmar"
    return "mmau"


def load_dataset(path: str | Path, fmt: str = "auto", limit: int | None = None) -> list[Sample]:
    """Load an MMAU / MMAR / AVQA file (``fmt="auto"`` detects it from the first row's fields)."""
    path = Path(path)
    rows = read_rows(path)
    if not rows:
        raise DatasetError(path, None, None, "no rows")
    fmt = detect_format(rows[0]) if fmt == "auto" else fmt
    if fmt not in FORMATS:
        raise DatasetError(path, None, None, f"unknown format {fmt!r}; choose one of {sorted(FORMATS)}")
    samples = [FORMATS[fmt](path, i, row) for i, row in enumerate(rows[:limit] if limit else rows)]
    seen: set[str] = set()
    for i, sample in enumerate(samples):
        if sample.id in seen:
            raise DatasetError(path, i, "id", f"duplicate id {sample.id!r}")
        seen.add(sample.id)
    return samples


def write_mmau(samples: list[Sample], path: str | Path) -> None:
    """Write samples as an MMAU test-mini JSON list with audio paths relative to the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [s.to_mmau(str(path.parent.resolve())) for s in samples]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(path)

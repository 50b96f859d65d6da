"""Reading a benchmark file as published, whichever corpus it is: MMAU test-mini (:mod:`.mmau`, a JSON
list), MMAR (:mod:`.mmar`, JSON list or JSONL) and AVQA as R1-AQA uses it (:mod:`.avqa`, JSONL, integer
``answer`` indexing ``multi_choice``); each corpus's own fields and quirks are its module's, what they share
:mod:`.rows`'.

A bad row never fails the file.  Each row becomes a :class:`Sample`; a row that cannot be scored
(no question, fewer than two usable choices, an answer that is none of the choices, an ``id`` an
earlier row has, a broken JSON line, and with ``check_audio`` a clip that is missing or does not
decode...) becomes an *unscorable* sample (``meta["unscorable"]`` holds the reason) that evaluation
counts in ``n`` and as wrong, and that :class:`Loaded` reports as ``rejected`` (row, id, reason).
Quirks of the published files handled as data:

* MMAR's last choice is sometimes empty: empty choices are dropped (the row stays scorable if two
  remain);
* an answer that differs from its choice only by white space or a newline is that choice;
* two choices with the same text (27 rows of MMAU test-mini: ``'three'`` twice) are kept as published,
  and counted in :attr:`Loaded.warnings`: the official scoring matches the answer's text, so the row
  scores as it does for everyone else (an evaluation that dropped them could not be compared);
* list-valued fields (MMAU's ``category`` on some rows) stay lists in ``meta``; the sample's
  ``category`` joins them with " / ".

Only a file that cannot be read at all (missing, not JSON, not a list of objects) raises
:class:`DatasetError`, naming the file.  Audio paths are resolved against the file's folder.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import avqa, mmar, mmau
from .mmau import write_mmau
from .rows import DatasetError, RowError, label_of, repeats_a_choice
from .sample import Sample

__all__ = [  # the names this module has always offered (DatasetError and write_mmau live in .rows and .mmau)
    "FORMATS",
    "DatasetError",
    "Loaded",
    "RowError",
    "detect_format",
    "load",
    "load_dataset",
    "read_rows",
    "repeats_a_choice",
    "write_mmau",
]

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    """A loaded file: every row as a Sample (unscorable ones included), and the rejected rows."""

    path: str
    format: str
    samples: list[Sample]
    rejected: list[dict] = field(default_factory=list)
    rows: int = 0
    repeated_choices: int = 0
    """Rows kept whose choices repeat a text (MMAU test-mini as published has 27)."""

    @property
    def warnings(self) -> list[str]:
        """What a user should know about rows that were kept (one line each)."""
        if not self.repeated_choices:
            return []
        return [
            f"{self.path}: {self.repeated_choices} of {self.rows} rows list a choice's text twice; kept as "
            "published (the answer is scored by its text, as the official scoring does)"
        ]

    @property
    def scorable(self) -> list[Sample]:
        return [s for s in self.samples if not s.meta.get("unscorable")]

    def summary(self) -> dict:
        """What ``autagent data validate`` prints."""

        def counts(key):  # the usable rows only: what evaluation will score
            return dict(sorted(Counter(key(s) for s in self.scorable if key(s)).items()))

        usable = self.scorable
        return {
            "file": self.path,
            "format": self.format,
            "rows": self.rows,
            "loaded": len(usable),
            "rejected": self.rejected,
            "repeated_choices": self.repeated_choices,
            "warnings": self.warnings,
            "usable": bool(usable),
            "by_domain": counts(lambda s: s.domain),
            "by_category": counts(lambda s: s.category),
            "by_subcategory": counts(lambda s: s.meta.get("sub-category")),
        }


FORMATS: dict[str, tuple[Callable, str, set]] = {
    "mmau": (mmau.row, mmau.AUDIO, mmau.FIELDS),
    "mmar": (mmar.row, mmar.AUDIO, mmar.FIELDS),
    "avqa": (avqa.row, avqa.AUDIO, avqa.FIELDS),
}
"""Each corpus: its row reader, its audio field and the fields a row is read from."""


def read_rows(path: str | Path) -> list:
    """A JSON list or JSONL file -> its rows; a JSONL line that is not JSON becomes a
    ``RowError`` in its place (so the row is reported, not the file failed)."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(path, None, None, "file not found")
    if not path.is_file():
        raise DatasetError(path, None, None, "not a regular file")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (UnicodeDecodeError, OSError) as err:
        raise DatasetError(path, None, None, f"cannot read as UTF-8 text ({err})") from err
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            raise DatasetError(path, None, None, f"invalid JSON ({err})") from err
        if not isinstance(rows, list):
            raise DatasetError(path, None, None, "expected a JSON list of rows")
        return rows
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                rows.append(RowError(None, f"line {number}: invalid JSON ({err.msg})"))
    if not rows and text.strip():
        raise DatasetError(path, None, None, "neither a JSON list nor JSON lines")
    return rows


def detect_format(rows: list) -> str:
    first = next((r for r in rows if isinstance(r, dict)), {})
    if "multi_choice" in first:
        return "avqa"
    if "audio_path" in first or "modality" in first:
        return "mmar"
    return "mmau"


def load(
    path: str | Path,
    fmt: str = "auto",
    limit: int | None = None,
    audio_wording: bool = False,
    check_audio: Callable[[str], object] | None = None,
) -> Loaded:
    """Every row of an MMAU / MMAR / AVQA file (``fmt="auto"`` detects it from the first row's fields).
    ``check_audio(path)`` raises ``ValueError`` naming the reason for a clip that cannot be used (the
    tools' audio loader: this layer reads no audio itself); its rows are rejected."""
    path = Path(path)
    rows = read_rows(path)
    fmt = detect_format(rows) if fmt == "auto" else fmt
    if fmt not in FORMATS:
        raise DatasetError(path, None, None, f"unknown format {fmt!r}; choose one of {sorted(FORMATS)}")
    parse, _, known = FORMATS[fmt]
    rows = rows[:limit] if limit else rows
    loaded = Loaded(str(path), fmt, [], rows=len(rows))
    seen: dict[str, int] = {}
    clips: dict[str, str | None] = {}  # clip -> why it cannot be used (None: it can), each checked once
    for i, row in enumerate(rows):
        raw_id = row.get("id") if isinstance(row, dict) else None
        sample_id = (
            str(raw_id)
            if isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) and str(raw_id).strip()
            else f"row-{i}"
        )
        first = seen.setdefault(sample_id, i)
        if first != i:
            sample_id = f"{sample_id}#row-{i}"
        try:
            if isinstance(row, RowError):
                raise row
            if not isinstance(row, dict):
                raise RowError(None, f"expected an object, got {type(row).__name__}")
            if first != i:  # predictions, records and reports are keyed by id
                raise RowError("id", f"{raw_id!r} is row {first}'s id too")
            fields = parse(path, row, audio_wording) if fmt == "avqa" else parse(path, row)
            if check_audio is not None:
                if fields["audio"] not in clips:
                    clips[fields["audio"]] = _unusable(check_audio, fields["audio"])
                if clips[fields["audio"]]:
                    raise RowError("audio", clips[fields["audio"]])
            meta = {k: v for k, v in row.items() if k not in known}
            loaded.samples.append(Sample(id=sample_id, meta={**meta, "row": i}, **fields))
            loaded.repeated_choices += repeats_a_choice(fields["choices"])
        except RowError as err:
            reason = str(err)
            loaded.rejected.append({"row": i, "id": sample_id, "reason": reason})
            raw = row if isinstance(row, dict) else {}
            loaded.samples.append(
                Sample(
                    id=sample_id,
                    audio="",
                    question=str(raw.get("question") or raw.get("question_text") or ""),
                    choices=(),
                    answer="",
                    domain=label_of(raw.get("task") or raw.get("modality")),
                    category=label_of(raw.get("category")),
                    meta={
                        "unscorable": reason,
                        "row": i,
                        **({"sub-category": raw["sub-category"]} if "sub-category" in raw else {}),
                    },
                )
            )
    for warning in loaded.warnings:
        log.warning(warning)
    return loaded


def _unusable(check_audio: Callable[[str], object], audio: str) -> str | None:
    """Why ``check_audio`` refuses the clip (None when it does not)."""
    try:
        check_audio(audio)
    except ValueError as err:
        return str(err)
    return None


def load_dataset(
    path: str | Path, fmt: str = "auto", limit: int | None = None, audio_wording: bool = False
) -> list[Sample]:
    """Every row's Sample, the unscorable ones included (they count as wrong in evaluation)."""
    return load(path, fmt, limit, audio_wording).samples

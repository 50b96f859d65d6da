"""MMAU test-mini as published loads whole (issue 63, item 8): 27 of its 1,000 rows list a choice's text
twice, and ``data validate`` once rejected them; the official scoring matches the answer's text, so
every loader keeps such a row as published and warns with their count.  The rows below are shaped like
MMAU's (invented questions).  Every test here fails on 0169c2d."""

from __future__ import annotations

import json

import numpy as np
import soundfile as sf

from autagent.cli import main
from autagent.data.loaders import load
from autagent.oneoff import read_batch
from rewards.scoring import is_correct, official_correct


def _rows() -> list[dict]:
    base = {"dataset": "made-up", "task": "sound", "split": "test-mini", "category": "Counting"}
    return [
        {
            **base,
            "id": "rep-1",
            "audio_id": "./clips/rep-1.wav",
            "question": "How many times does the kettle whistle?",
            "choices": ["two", "three", "three", "five"],
            "answer": "three",
        },
        {
            **base,
            "id": "rep-2",
            "audio_id": "./clips/rep-2.wav",
            "question": "Which utensil is dropped first?",
            "choices": ["a spoon", "a fork", "a spoon "],
            "answer": "a spoon  ",
        },
        {
            **base,
            "id": "plain",
            "audio_id": "./clips/plain.wav",
            "question": "Is the door opened or closed?",
            "choices": ["opened", "closed"],
            "answer": "closed",
        },
    ]


def _dataset(tmp_path) -> str:
    path = tmp_path / "mmau-test-mini.json"
    path.write_text(json.dumps(_rows()))
    return str(path)


def test_data_validate_keeps_rows_whose_choices_repeat_and_counts_them(tmp_path, capsys):
    assert main(["data", "validate", _dataset(tmp_path), "--skip-audio"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report["rows"], report["loaded"], report["rejected"]) == (3, 3, [])
    assert report["repeated_choices"] == 2 and len(report["warnings"]) == 1
    (warning,) = err.strip().splitlines()
    assert warning.startswith("autagent: warning: ") and "2 of 3 rows list a choice's text twice" in warning


def test_the_loader_keeps_them_as_published_and_the_answer_scores_by_its_text(tmp_path, caplog):
    loaded = load(_dataset(tmp_path))
    assert not loaded.rejected and [s.id for s in loaded.scorable] == ["rep-1", "rep-2", "plain"]
    first, second = loaded.samples[:2]
    assert first.choices == ("two", "three", "three", "five") and first.answer == "three"
    assert second.answer == "a spoon"  # white space aside, the one text listed twice
    assert is_correct(first, "three") and official_correct(first, "three") and not is_correct(first, "two")
    assert is_correct(first, "C")  # the second "three" by its label is still "three"
    assert "2 of 3 rows list a choice's text twice" in caplog.text


def test_select_batch_reads_such_a_file(tmp_path):
    (tmp_path / "clips").mkdir()
    tone = (0.3 * np.sin(np.arange(16000) / 5)).astype(np.float32)
    for row in _rows():
        sf.write(str(tmp_path / row["audio_id"]), tone, 16000)
    queries = read_batch(_dataset(tmp_path), None)
    assert [q.choices for q in queries][0] == ("two", "three", "three", "five")
    assert not any(q.error for q in queries)

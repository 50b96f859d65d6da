"""One module per corpus under autagent/data (issue 64, item 4), as lhotse keeps its recipes: MMAU, MMAR and
AVQA each read their own rows, what they share lives in one place, and the loader's public names are
unchanged."""

from __future__ import annotations

import json

import pytest


def test_each_corpus_has_its_module_and_the_loader_reads_through_them():
    from autagent.data import avqa, loaders, mmar, mmau, rows

    assert {k: v[0] for k, v in loaders.FORMATS.items()} == {"mmau": mmau.row, "mmar": mmar.row, "avqa": avqa.row}
    assert {k: v[2] for k, v in loaders.FORMATS.items()} == {
        "mmau": mmau.FIELDS,
        "mmar": mmar.FIELDS,
        "avqa": avqa.FIELDS,
    }
    assert loaders.DatasetError is rows.DatasetError and loaders.write_mmau is mmau.write_mmau


def test_the_public_names_are_where_they_were():
    import autagent.data as data
    from autagent.data.loaders import DatasetError, Loaded, load, load_dataset, read_rows, write_mmau

    assert data.DatasetError is DatasetError and data.load_dataset is load_dataset and data.write_mmau is write_mmau
    assert callable(load) and callable(read_rows) and Loaded.__name__ == "Loaded"


@pytest.mark.parametrize(
    "row, fmt, question, answer",
    [
        (
            {
                "id": "a",
                "audio_id": "x.wav",
                "question": "Q?",
                "choices": ["one", "two"],
                "answer": "two",
                "task": "sound",
            },
            "mmau",
            "Q?",
            "two",
        ),
        (
            {
                "id": "b",
                "audio_path": "x.wav",
                "question": "Q?",
                "choices": ["one", "two", ""],
                "answer": "one",
                "modality": "music",
            },
            "mmar",
            "Q?",
            "one",
        ),
        (
            {
                "id": "c",
                "audio_path": "x.wav",
                "question_text": "What is in the video?",
                "multi_choice": ["a dog", "a cat"],
                "answer": 1,
            },
            "avqa",
            "What is in the audio?",
            "a cat",
        ),
    ],
)
def test_a_row_of_each_corpus_loads_by_its_own_fields(tmp_path, row, fmt, question, answer):
    from autagent.data.loaders import load

    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    loaded = load(path, audio_wording=True)
    assert loaded.format == fmt and not loaded.rejected
    sample = loaded.samples[0]
    assert sample.question == question and sample.answer == answer and sample.audio == str(tmp_path / "x.wav")

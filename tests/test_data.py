"""Dataset loaders on files in the benchmarks' exact formats, and the embedded benchmark generator."""
from __future__ import annotations

import hashlib
import json

import pytest

from autagent.data import DatasetError, load_dataset
from autagent.data.embedded import QUESTION_TYPES, EmbeddedBenchmarkConfig, generate

MMAU = [{"id": "a1b2", "audio_id": "./test-mini-audios/a1b2.wav", "question": "What is the tempo?",
         "choices": ["60 BPM", "120 BPM"], "answer": "120 BPM", "dataset": "MusicCaps", "task": "music",
         "split": "test-mini", "category": "Temporal Reasoning", "sub-category": "Tempo", "difficulty": "easy"}]
MMAR = {"id": "mmar-1", "audio_path": "./audio/x.wav", "question": "Who speaks?", "choices": ["a man", "a woman"],
        "answer": "a woman", "modality": "speech", "category": "Semantic", "sub-category": "Speaker", "language": "en"}
AVQA = {"id": 215, "video_name": "-HG3Omg_89c_30", "question_id": 12, "question_text": "What happened in the video?",
        "multi_choice": ["motorboat", "Yacht consignment", "Sailboat set sail", "Consignment car"], "answer": 1,
        "question_relation": "View", "question_type": "Happening", "audio_path": "/data/avqa/-HG3Omg_89c_30.wav"}


def test_mmau_json(tmp_path):
    path = tmp_path / "mmau-test-mini.json"
    path.write_text(json.dumps(MMAU))
    (sample,) = load_dataset(path)
    assert sample.answer == "120 BPM" and sample.choices == ("60 BPM", "120 BPM")
    assert sample.audio == str((tmp_path / "test-mini-audios/a1b2.wav").resolve())
    assert sample.domain == "music" and sample.category == "Temporal Reasoning"
    assert sample.meta["difficulty"] == "easy"


def test_mmar_jsonl_and_json(tmp_path):
    jsonl = tmp_path / "MMAR-meta.jsonl"
    jsonl.write_text(json.dumps(MMAR) + "\n\n" + json.dumps({**MMAR, "id": "mmar-2"}) + "\n")
    samples = load_dataset(jsonl)
    assert [s.id for s in samples] == ["mmar-1", "mmar-2"] and samples[0].domain == "speech"
    as_list = tmp_path / "MMAR-meta.json"
    as_list.write_text(json.dumps([MMAR]))
    assert load_dataset(as_list)[0].answer == "a woman"


def test_avqa_integer_answer_indexes_multi_choice(tmp_path):
    path = tmp_path / "avqa_train.jsonl"
    path.write_text(json.dumps(AVQA) + "\n")
    (sample,) = load_dataset(path)
    assert sample.answer == "Yacht consignment" and sample.id == "215"
    assert sample.audio == "/data/avqa/-HG3Omg_89c_30.wav"


@pytest.mark.parametrize("row, fmt, message", [
    ({**MMAR, "answer": "a child"}, "mmar", "row 0, field 'answer'"),
    ({k: v for k, v in MMAR.items() if k != "question"}, "mmar", "row 0, field 'question': missing"),
    ({**AVQA, "answer": 7}, "avqa", "row 0, field 'answer': expected an index in 0..3"),
    ({**AVQA, "multi_choice": "motorboat"}, "avqa", "field 'multi_choice': expected list"),
    ({**MMAU[0], "choices": ["only one"]}, "mmau", "field 'choices': needs at least two"),
])
def test_malformed_rows_name_file_row_and_field(tmp_path, row, fmt, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DatasetError) as err:
        load_dataset(path, fmt)
    assert str(path) in str(err.value) and message in str(err.value)


def test_bad_json_line_and_duplicate_ids(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(MMAR) + "\n{not json\n")
    with pytest.raises(DatasetError, match="row 2: invalid JSON line"):
        load_dataset(path)
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps([MMAR, MMAR]))
    with pytest.raises(DatasetError, match="duplicate id 'mmar-1'"):
        load_dataset(dup)
    with pytest.raises(DatasetError, match="file not found"):
        load_dataset(tmp_path / "nope.json")


def _digest(root):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.wav"))}


def test_embedded_benchmark_is_deterministic_and_typed(tmp_path):
    config = dict(seed=7, sizes={"test": len(QUESTION_TYPES)}, workers=2)
    paths_a = generate(EmbeddedBenchmarkConfig(root=str(tmp_path / "a"), **config), progress=False)
    paths_b = generate(EmbeddedBenchmarkConfig(root=str(tmp_path / "b"), **config), progress=False)
    assert paths_a["test"].read_text() == paths_b["test"].read_text()
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    samples = load_dataset(paths_a["test"])
    assert len(QUESTION_TYPES) >= 12 and {s.category for s in samples} == set(QUESTION_TYPES)
    for sample in samples:
        assert sample.answer in sample.choices and set(sample.meta["tools"]) <= {
            "asr", "emotion", "chords", "tempo", "pitch", "sound_events"}
    tool_free = {s.category for s in samples if not s.meta["tools"]}
    assert tool_free and tool_free != set(QUESTION_TYPES)
    other = generate(EmbeddedBenchmarkConfig(root=str(tmp_path / "c"), **{**config, "seed": 8}), progress=False)
    assert other["test"].read_text() != paths_a["test"].read_text()


def test_unknown_question_type_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown question types"):
        generate(EmbeddedBenchmarkConfig(root=str(tmp_path), sizes={"test": 1}, types=["karaoke"]), progress=False)

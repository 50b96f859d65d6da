"""Loaders on files shaped like the published MMAU/MMAR/AVQA files (quirks included), ``autagent data
validate``, and the embedded benchmark: determinism, held-out pools, audio-dependent tools, independence."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autagent.cli import main
from autagent.data import DatasetError, load_dataset
from autagent.data.loaders import load

MMAU = [
    {
        "id": "a1b2",
        "audio_id": "./test-mini-audios/a1b2.wav",
        "question": "What is the tempo?",
        "choices": ["60 BPM", "120 BPM"],
        "answer": "120 BPM",
        "dataset": "MusicCaps",
        "task": "music",
        "split": "test-mini",
        "category": "Temporal Reasoning",
        "sub-category": "Tempo",
        "difficulty": "easy",
    },
    {
        "id": "c3d4",
        "audio_id": "./test-mini-audios/c3d4.wav",
        "question": "Who is talking?",
        "choices": ["Man", "Woman"],
        "answer": "Man",
        "task": "speech",
        "category": ["Reasoning"],
        "sub-category": "Speaker Identification",
        "difficulty": "hard",
    },
]
MMAR = {
    "id": "mmar-1",
    "audio_path": "./audio/x.wav",
    "question": "Who speaks?",
    "choices": ["a man", "a woman"],
    "answer": "a woman",
    "modality": "speech",
    "category": "Semantic Layer",
    "sub-category": "Speaker",
    "language": "en",
}
AVQA = {
    "id": 215,
    "video_name": "-HG3Omg_89c_30",
    "question_id": 12,
    "question_text": "What happened in the video?",
    "multi_choice": ["motorboat", "Yacht consignment", "Sailboat set sail", "Consignment car"],
    "answer": 1,
    "question_relation": "View",
    "question_type": "Happening",
    "audio_path": "/data/avqa/-HG3Omg_89c_30.wav",
}


def _mmar_quirks(tmp_path) -> Path:
    """MMAR as published: an empty last choice, an answer differing from its choice by white space,
    a row with one usable choice, a broken JSON line, the mix-* modalities."""
    rows = [
        json.dumps(MMAR),
        json.dumps(
            {
                **MMAR,
                "id": "mmar-2",
                "choices": ["thunder", "rain", "wind", ""],
                "answer": "rain",
                "modality": "mix-sound-speech",
                "sub-category": "Weather",
            }
        ),
        json.dumps(
            {
                **MMAR,
                "id": "mmar-3",
                "choices": ["C major", "A minor\n"],
                "answer": "A  minor",
                "modality": "mix-sound-music",
            }
        ),
        json.dumps({**MMAR, "id": "mmar-4", "choices": ["only", ""], "answer": "only"}),
        '{"id": "mmar-5", "audio_path": ',
        json.dumps({**MMAR, "id": "mmar-6", "answer": "a child"}),
    ]
    path = tmp_path / "MMAR-meta.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_mmau_json_keeps_list_valued_fields(tmp_path):
    path = tmp_path / "mmau-test-mini.json"
    path.write_text(json.dumps(MMAU))
    first, second = load_dataset(path)
    assert first.answer == "120 BPM" and first.audio == str((tmp_path / "test-mini-audios/a1b2.wav").resolve())
    assert first.domain == "music" and first.category == "Temporal Reasoning" and first.meta["sub-category"] == "Tempo"
    assert second.category == "Reasoning" and second.meta["category"] == ["Reasoning"]  # the list stays a list
    assert load(path).rows == 2 and not load(path).rejected


def test_mmar_file_as_published_loads_with_every_row_counted(tmp_path):
    loaded = load(_mmar_quirks(tmp_path))
    assert loaded.format == "mmar" and loaded.rows == 6 and len(loaded.samples) == 6
    by_id = {s.id: s for s in loaded.samples}
    assert by_id["mmar-2"].choices == ("thunder", "rain", "wind") and by_id["mmar-2"].domain == "mix-sound-speech"
    assert by_id["mmar-3"].answer == "A minor\n"  # the choice it names, white space aside
    rejected = {r["id"]: r for r in loaded.rejected}
    assert set(rejected) == {"mmar-4", "row-4", "mmar-6"}
    assert "choices" in rejected["mmar-4"]["reason"] and rejected["mmar-4"]["row"] == 3
    assert "invalid JSON" in rejected["row-4"]["reason"] and "answer" in rejected["mmar-6"]["reason"]
    assert all(by_id[i].meta["unscorable"] for i in ("mmar-4", "row-4", "mmar-6"))


def test_avqa_integer_answer_and_audio_wording(tmp_path):
    path = tmp_path / "avqa_train.jsonl"
    path.write_text(json.dumps(AVQA) + "\n")
    (sample,) = load_dataset(path)
    assert (
        sample.answer == "Yacht consignment" and sample.id == "215" and sample.audio == "/data/avqa/-HG3Omg_89c_30.wav"
    )
    assert load_dataset(path, audio_wording=True)[0].question == "What happened in the audio?"


def test_files_that_cannot_be_read_name_the_file(tmp_path):
    with pytest.raises(DatasetError, match="file not found"):
        load_dataset(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"id": 1,')
    with pytest.raises(DatasetError, match=f"{re.escape(str(bad))}: invalid JSON"):
        load_dataset(bad)


def test_data_validate_prints_one_json_object(tmp_path, capsys):
    fields_only = ["--skip-audio", "--allow-rejects"]  # the quirks file's clips are not here
    assert main(["data", "validate", str(_mmar_quirks(tmp_path)), *fields_only]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["rows"], report["loaded"], len(report["rejected"])) == (6, 3, 3)
    assert {r["id"] for r in report["rejected"]} == {"mmar-4", "row-4", "mmar-6"}
    assert report["by_domain"]["mix-sound-speech"] == 1 and "Semantic Layer" in report["by_category"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"id": "x"}) + "\n")
    assert main(["data", "validate", str(empty)]) == 1  # no usable row
    assert main(["data", "validate", str(_mmar_quirks(tmp_path)), "--skip-audio"]) == 1  # rejects, not allowed


# ---- the embedded benchmark ------------------------------------------------------------------------------
def _digest(root):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.wav"))}


def test_benchmark_is_deterministic(tmp_path):
    from autagent.data.generator import EmbeddedBenchmarkConfig, generate

    config = dict(seed=7, sizes={"test": 6}, workers=2)
    paths_a = generate(EmbeddedBenchmarkConfig(root=str(tmp_path / "a"), **config), progress=False)
    paths_b = generate(EmbeddedBenchmarkConfig(root=str(tmp_path / "b"), **config), progress=False)
    strip = lambda p: [{k: v for k, v in r.items() if k != "audio_id"} for r in json.loads(p.read_text())]  # noqa: E731
    assert strip(paths_a["test"]) == strip(paths_b["test"]) and _digest(tmp_path / "a") == _digest(tmp_path / "b")
    other = generate(EmbeddedBenchmarkConfig(root=str(tmp_path / "c"), **{**config, "seed": 8}), progress=False)
    assert strip(other["test"]) != strip(paths_a["test"])


def test_training_only_listening_kinds_replace_some_train_rows_and_leave_the_rest_as_they_were(tmp_path):
    """``listening_share`` swaps a share of train rows for style and mood questions a listen
    settles; every other train row, and the whole test split (questions and audio), stay v5's."""
    from autagent.data.generator import EmbeddedBenchmarkConfig, generate, listening

    config = dict(seed=5, sizes={"train": 20, "test": 3}, workers=2)
    mixed = generate(EmbeddedBenchmarkConfig(root=str(tmp_path / "a"), listening_share=0.3, **config), progress=False)
    plain = generate(EmbeddedBenchmarkConfig(root=str(tmp_path / "b"), listening_share=0.0, **config), progress=False)
    rows = {
        name: {s: json.loads(p.read_text()) for s, p in paths.items()} for name, paths in (("a", mixed), ("b", plain))
    }
    assert rows["a"]["test"] == rows["b"]["test"]
    assert _digest(tmp_path / "a" / "audio" / "test") == _digest(tmp_path / "b" / "audio" / "test")
    swapped = [a for a, b in zip(rows["a"]["train"], rows["b"]["train"]) if a != b]
    kept = [a for a, b in zip(rows["a"]["train"], rows["b"]["train"]) if a == b]
    assert 2 <= len(swapped) <= 12 and kept
    assert {r["category"] for r in swapped} <= set(listening.KINDS)
    assert not {r["category"] for r in kept} & set(listening.KINDS)
    for row in swapped:
        assert row["answer"] in row["choices"] and row["task"] == "music"
        assert row["question"].rstrip() and not row["tools"]
    with pytest.raises(ValueError, match="listening_share"):
        EmbeddedBenchmarkConfig(listening_share=1.5)
    with pytest.raises(ValueError, match="listening_kinds: unknown kinds \\['music_presence'\\]"):
        EmbeddedBenchmarkConfig(listening_kinds=["music_presence"])


def test_listening_kinds_ask_in_their_own_words_about_audio_that_is_heard():
    """Each training-only kind: its own phrasings (plain, framed or terse), distinct choices with the
    answer among them, music audio that is finite and audible."""
    from autagent.data.generator import listening
    from autagent.data.generator.kinds import Ctx
    from autagent.data.generator.phrasings import PHRASINGS

    for kind, (make, _) in listening.KINDS.items():
        assert kind not in PHRASINGS
        for seed in range(6):
            item = make(Ctx(np.random.default_rng(seed), "train"))
            assert item.answer in item.choices and len(set(item.choices)) == len(item.choices) >= 2, kind
            assert np.isfinite(item.audio).all() and np.abs(item.audio).max() > 1e-3, kind
            plain = [re.sub(r"\\{i\\}", ".+", re.escape(p)) for p in listening.PHRASINGS[kind]]
            asked = any(re.search(w, item.question, re.IGNORECASE) for w in plain)
            assert asked or item.question in listening.TERSE.get(kind, ()), item.question


def test_phrasings_voices_and_sentences_of_the_test_split_are_held_out(tiny_bench):
    from autagent.data.generator import vocab
    from autagent.data.generator.phrasings import PHRASINGS
    from scripts.calibration import CALIBRATION_VOICES

    for kind, pools in PHRASINGS.items():
        assert len(pools["train"]) + len(pools["test"]) >= 8, kind
        assert not set(pools["train"]) & set(pools["test"]), kind
    assert not set(vocab.VOICES["train"]) & set(vocab.VOICES["test"])
    assert not (set(vocab.VOICES["train"]) | set(vocab.VOICES["test"])) & set(CALIBRATION_VOICES)
    assert not set(vocab.SENTENCES["train"]) & set(vocab.SENTENCES["test"])
    number = re.compile(r"\d+(\.\d+)?")
    template = lambda q: number.sub("#", re.sub(r"'[^']*'", "'#'", q))  # noqa: E731
    train = {template(s.question) for s in tiny_bench["train"]}
    assert tiny_bench["test"] and not train & {template(s.question) for s in tiny_bench["test"]}


def test_the_fixture_benchmark_covers_the_domains_and_most_kinds(tiny_bench):
    """The seeded fixture draws kinds by weight: all four domains, 24 of the 27 kinds (every kind is
    generated by the next test), answers among the choices, tools among the seven."""
    from autagent.data.generator import KINDS

    samples = tiny_bench["train"] + tiny_bench["test"]
    assert {s.domain for s in samples} >= {"sound", "music", "speech", "mixed"}
    assert len({s.category for s in samples}) >= len(KINDS) - 4
    for sample in samples:
        assert sample.answer in sample.choices and set(sample.meta["tools"]) <= set(tiny_bench["tools"])
    assert any(len(s.meta["tools"]) == 2 for s in samples) and any(not s.meta["tools"] for s in samples)


@pytest.mark.parametrize("pool", ["train", "test"])
def test_every_kind_is_generated_and_sound_on_both_phrasing_pools(pool):
    """Each of the 27 kinds, on the pool's own phrasings: a question of that pool, two or more distinct
    choices with the answer among them, known tools, a domain, and audio that is finite and heard."""
    import zlib

    from autagent.data.generator import KINDS
    from autagent.data.generator.kinds import Ctx
    from autagent.data.generator.phrasings import PHRASINGS, TRAIN_FRAMES, TRAIN_TERSE

    seven = {"asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers"}
    other = "test" if pool == "train" else "train"

    def wordings(kind, which):  # regexes of every wording a pool allows (training adds frames and terse forms)
        plain = [re.escape(p).replace(r"\{", "{").replace(r"\}", "}") for p in PHRASINGS[kind][which]]
        plain = [re.sub(r"\{[^}]*\}", ".+", p) for p in plain]
        if which == "train":
            frames = [re.escape(f).replace(r"\{q\}", "(?:.+)").replace(r"\{lower\}", "(?:.+)") for f in TRAIN_FRAMES]
            plain += frames + [re.escape(t) for t in TRAIN_TERSE.get(kind, ())]
        return plain

    for kind, (make, _) in KINDS.items():
        item = make(Ctx(np.random.default_rng(zlib.crc32(f"{kind}-{pool}".encode())), pool))
        assert item.answer in item.choices and len(set(item.choices)) == len(item.choices) >= 2, kind
        assert set(item.tools) <= seven and item.domain in {"sound", "music", "speech", "mixed"}, kind
        assert np.isfinite(item.audio).all() and len(item.audio) > 8000 and np.abs(item.audio).max() > 1e-3, kind
        if kind in PHRASINGS:
            mine = [re.fullmatch(w, item.question) for w in wordings(kind, pool)]
            theirs = [re.fullmatch(w, item.question) for w in wordings(kind, other)[: len(PHRASINGS[kind][other])]]
            assert any(mine) and not any(theirs), (kind, item.question)


def test_the_same_question_and_choices_need_different_tools_for_different_clips():
    from autagent.data.generator import KINDS
    from autagent.data.generator.kinds import Ctx

    seen: dict = {}
    for seed in range(24):
        item = KINDS["what_heard"][0](Ctx(np.random.default_rng(seed), "test"))
        seen.setdefault((item.question, tuple(item.choices)), set()).add(tuple(item.tools))
    assert any(len(tools) > 1 for tools in seen.values()), seen


def test_animal_clips_are_real_recordings_the_other_pool_never_hears():
    from autagent.data.generator import vocab
    from autagent.data.generator.kinds import Ctx
    from autagent.data.generator.sounds import animal

    for name, (recordings, _) in vocab.ANIMALS.items():
        assert not set(recordings["train"]) & set(recordings["test"]), name
        assert all((Path(vocab.RECORDINGS) / f).exists() for f in recordings["train"] + recordings["test"]), name
    options = set()
    for seed in range(16):
        item = animal(Ctx(np.random.default_rng(seed), "test"))
        recordings, names = vocab.ANIMALS[item.facts["animal"]]
        assert item.facts["recording"] in recordings["test"] and item.answer in names and item.domain == "sound"
        animals_named = [c for c in item.choices if any(c in v[1] for v in vocab.ANIMALS.values())]
        assert len(animals_named) == (1 if item.facts["options"] == "far" else 4), item
        assert item.tools == ([] if item.facts["options"] == "far" else ["sound_events"])
        options.add(item.facts["options"])
    assert options == {"far", "near"}


def test_describe_asks_one_question_pool_whose_choices_and_audio_decide_the_tools():
    """In ``describe`` the question text never tells the tool: one phrasing recurs over items that need
    different tools (and pairs of tools), and the clip's domain follows the axis."""
    from autagent.data.generator.describe import AXES, describe
    from autagent.data.generator.kinds import Ctx
    from autagent.data.generator.phrasings import PHRASINGS

    tools_by_question: dict = {}
    for seed in range(40):
        item = describe(Ctx(np.random.default_rng(seed), "test"))
        assert item.question in PHRASINGS["describe"]["test"] and item.answer in item.choices
        assert item.domain == AXES[item.facts["axis"]][0] and len(set(item.choices)) == len(item.choices)
        tools_by_question.setdefault(item.question, set()).add(tuple(item.tools))
    assert max(len(tools) for tools in tools_by_question.values()) >= 4, tools_by_question
    assert any(len(t) == 2 for tools in tools_by_question.values() for t in tools)


def test_reasoner_and_tools_neither_import_nor_mirror_the_generator():
    root = Path(__file__).resolve().parent.parent
    code = (
        "import sys, autagent.reasoners.embedded, autagent.reasoners.hearing, tools.pool, tools.registry;"
        "import tools.asr, tools.emotion, tools.chords, tools.tempo, tools.pitch, tools.sound_events, tools.speakers;"
        "print([m for m in sys.modules if m.startswith('autagent.data.generator')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert out.stdout.strip() == "[]"
    from autagent.data.generator import vocab
    from autagent.data.generator.phrasings import PHRASINGS

    phrases = set()
    for value in vars(vocab).values():
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack += list(item.keys()) + list(item.values())
            elif isinstance(item, (list, tuple)):
                stack += list(item)
            elif isinstance(item, str) and len(item.split()) >= 2 and len(item) >= 12:
                phrases.add(item.lower())
    phrases |= {p.lower() for pools in PHRASINGS.values() for pool in pools.values() for p in pool}
    sources = list((root / "autagent" / "reasoners").glob("*.py")) + list((root / "tools").rglob("*.py"))
    for path in sources:
        text = path.read_text().lower()
        found = sorted(p for p in phrases if p in text)
        assert not found, f"{path.name} mirrors the generator's vocabulary: {found[:5]}"

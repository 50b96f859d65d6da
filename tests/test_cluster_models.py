"""The paper's models on the cluster (its training: ``test_cluster_training.py``) through their real
loading code, on tiny random-weight models built here: Whisper (transformers ASR pipeline), emotion2vec
(funasr), AST (sound events), pyannote diarization, Qwen2-Audio (the reasoner, batched with left padding)."""

from __future__ import annotations

import pytest

from autagent.testing import tiny_models as tiny
from tools import ToolRunner


@pytest.fixture(scope="module")
def cluster_runner(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    whisper = tiny.build_tiny_whisper(root / "whisper")
    ast = tiny.build_tiny_ast(root / "ast")
    settings = {
        "asr": {"model_id": str(whisper), "device": "cpu", "language": None, "max_new_tokens": 8},
        "sound_events": {"model_id": str(ast), "device": "cpu"},
    }
    return ToolRunner("cluster", settings)


def test_whisper_pipeline_backend_loads_local_model(cluster_runner, speech_wav):
    record = cluster_runner.run("asr", str(speech_wav[0]))
    assert "error" not in record, record.get("error")
    assert record["backend"] == "transformers-whisper" and isinstance(record["output"]["text"], str)
    assert all({"start", "end", "text"} <= set(seg) for seg in record["output"]["segments"])


def test_ast_backend_loads_local_model(cluster_runner, speech_wav):
    record = cluster_runner.run("sound_events", str(speech_wav[0]))
    assert "error" not in record, record.get("error")
    labels = [item["label"] for item in record["output"]["labels"]]
    assert set(labels) <= {"Speech", "Music", "Silence", "Dog"} and labels
    assert record["output"]["timeline"][-1]["end"] <= 10.0


def test_emotion2vec_backend_loads_local_funasr_model(tmp_path, speech_wav):
    from tools import ToolRunner

    model_dir = tiny.build_tiny_emotion2vec(tmp_path / "emotion2vec")
    record = ToolRunner("cluster", {"emotion": {"model_id": str(model_dir), "device": "cpu"}}).run(
        "emotion", str(speech_wav[0])
    )
    assert "error" not in record, record.get("error")
    output = record["output"]
    assert output["method"] == "emotion2vec" and abs(sum(output["scores"].values()) - 1) < 1e-3
    assert {"angry", "happy", "neutral", "sad"} <= set(output["scores"]) and output["label"] in output["scores"]


def test_cluster_defaults_name_the_papers_models():
    runner = ToolRunner("cluster")
    assert runner.identity("asr")[0] == "transformers-whisper"
    from tools import get_tool

    assert get_tool("asr").backend("cluster").default_settings["model_id"] == "openai/whisper-large-v3"
    assert (
        get_tool("sound_events")
        .backend("cluster")
        .default_settings["model_id"]
        .startswith("MIT/ast-finetuned-audioset")
    )
    assert get_tool("emotion").backend("cluster").default_settings["model_id"] == "iic/emotion2vec_plus_large"
    assert get_tool("chords").backend("cluster").name == "madmom-cnn-crf"
    assert get_tool("speakers").backend("cluster").default_settings["model_id"] == "pyannote/speaker-diarization-3.1"


def test_missing_cluster_model_is_an_error_record_not_a_crash(speech_wav, tmp_path):
    runner = ToolRunner("cluster", {"sound_events": {"model_id": str(tmp_path / "absent"), "device": "cpu"}})
    record = runner.run("sound_events", str(speech_wav[0]))
    assert record["output"] is None and "absent" in record["error"]


def test_pyannote_backend_loads_a_local_pipeline(tmp_path, speech_wav):
    pipeline = tiny.build_tiny_pyannote(tmp_path / "diarization")
    runner = ToolRunner("cluster", {"speakers": {"model_id": str(pipeline), "device": "cpu"}})
    record = runner.run("speakers", str(speech_wav[0]))
    assert "error" not in record, record.get("error")
    assert record["backend"] == "pyannote-diarization" and record["version"].startswith("pyannote.audio-4.")
    output = record["output"]
    assert output["num_speakers"] == len({t["speaker"] for t in output["turns"]})
    assert all(t["speaker"].startswith("S") and 0.0 <= t["start"] <= t["end"] for t in output["turns"])


def test_qwen2_audio_reasoner_batches_like_one_by_one(tmp_path, speech_wav, music_wav):
    from autagent.data.sample import Sample
    from autagent.reasoners import Qwen2AudioConfig
    from autagent.reasoners.qwen2_audio import Qwen2AudioReasoner

    model_dir = tiny.build_tiny_qwen2_audio(tmp_path / "qwen2audio")
    config = Qwen2AudioConfig(model_id=str(model_dir), device="cpu", dtype="float32", max_new_tokens=6, batch_size=3)
    reasoner = Qwen2AudioReasoner(config)
    base = Sample(
        id="s", audio=str(speech_wav[0]), question="What kind of audio?", choices=("speech", "music"), answer="speech"
    )
    prompt = reasoner.prompt(base, [{"tool": "tempo", "output": {"bpm": 120.0, "beats": []}}])
    assert (
        "<|AUDIO|>" in prompt and '"output": "120.0 BPM"' in prompt
    )  # the paper's shape for tempo, with its unit (tools/notation.py)
    requests = [
        (base, None),
        (
            Sample(**{**base.__dict__, "question": "A much longer question about what the clip holds?"}),
            [{"tool": "tempo", "output": {"bpm": 120.0, "beats": []}}],
        ),
        (Sample(**{**base.__dict__, "audio": str(music_wav)}), None),
    ]
    batched = reasoner.answer_many(requests)
    single = [reasoner.answer_many([r])[0] for r in requests]
    assert batched == single  # left padding: every row continues from its own prompt
    missing = Sample(**{**base.__dict__, "audio": str(tmp_path / "missing.wav")})
    (reply,) = reasoner.answer_many([(missing, None)])
    assert reply.text is None and "file not found" in reply.error
    assert reasoner.fingerprint().startswith("qwen2-audio-")

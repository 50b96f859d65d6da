"""The audio loader and bad-input handling: clear errors, and a batch that always completes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tools import ToolRunner
from tools.audio import AudioError, content_hash, load_audio
from tools.pool import PoolConfig, ToolPool


@pytest.fixture()
def bad_files(tmp_path):
    files = {
        "missing": tmp_path / "missing.wav",
        "empty": tmp_path / "empty.wav",
        "corrupt": tmp_path / "corrupt.wav",
        "silent": tmp_path / "silent.wav",
        "nan": tmp_path / "nan.wav",
    }
    files["empty"].write_bytes(b"")
    files["corrupt"].write_bytes(b"RIFF\x00\x00garbage" + bytes(range(256)) * 4)
    sf.write(str(files["silent"]), np.zeros(16000, dtype=np.float32), 16000)
    nan = np.full(16000, np.nan, dtype=np.float32)
    sf.write(str(files["nan"]), nan, 16000, subtype="FLOAT")
    return files


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("missing", "file not found"),
        ("empty", "empty"),
        ("corrupt", "cannot decode"),
        ("silent", "silent"),
        ("nan", "NaN"),
    ],
)
def test_bad_file_errors_name_file_and_reason(bad_files, kind, reason):
    with pytest.raises(AudioError) as err:
        load_audio(bad_files[kind])
    assert str(bad_files[kind]) in str(err.value) and reason in str(err.value)


def test_resampling_downmix_and_length_cap(melody_wav, tmp_path):
    path, _, _ = melody_wav
    audio = load_audio(path, sample_rate=16000, max_seconds=1.5)
    assert audio.sample_rate == 16000 and audio.samples.ndim == 1
    assert abs(audio.duration - 1.5) < 0.01
    flac = tmp_path / "clip.flac"
    sf.write(str(flac), np.sin(np.linspace(0, 2000, 8000)).astype(np.float32), 8000)
    assert load_audio(flac, 22050).sample_rate == 22050


def test_mp3_via_ffmpeg_fallback(speech_wav, tmp_path):
    import subprocess

    mp3 = tmp_path / "speech.mp3"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(speech_wav[0]), str(mp3)], check=True)
    audio = load_audio(mp3, 16000)
    assert audio.duration > 2.0


def test_bad_clip_gives_error_records_and_batch_completes(bad_files, click_wav, tmp_path):
    pool = ToolPool(PoolConfig(executor="local", cache_dir=str(tmp_path / "cache")))
    paths = [str(bad_files["corrupt"]), str(click_wav[0]), str(bad_files["missing"]), str(bad_files["silent"])]
    results = pool.run_many(paths, ["tempo", "pitch"])
    assert "error" not in results[1]["tempo"] and results[1]["tempo"]["output"]["bpm"] > 0
    for i in (0, 2, 3):
        for tool in ("tempo", "pitch"):
            assert "error" in results[i][tool] and paths[i] in results[i][tool]["error"]
    # error records are not cached: the silent clip (a readable file, so it has a content key) left no
    # entry, and once the file at that path is fixed its record is computed, not served
    silent_key = pool._key(content_hash(bad_files["silent"]), "tempo")
    entries = list(Path(pool.cache.root).rglob("*.json"))
    assert pool.cache.get(*silent_key) is None and len(entries) == 2  # tempo and pitch of the one good clip
    computed = pool.computed
    Path(bad_files["silent"]).write_bytes(Path(click_wav[0]).read_bytes() + b"\0\0")  # new content, good audio
    fixed = pool.run_many([str(bad_files["silent"])], ["tempo"])[0]["tempo"]
    assert "error" not in fixed and pool.computed == computed + 1 and fixed["output"]["bpm"] > 0


def test_runner_never_raises_on_model_failure(tmp_path, click_wav):
    runner = ToolRunner("embedded", {"asr": {"model_path": str(tmp_path / "no-such-model")}})
    record = runner.run("asr", str(click_wav[0]))
    assert "error" in record and record["output"] is None


def test_a_files_hash_is_read_once_while_it_is_unchanged_and_again_once_rewritten(tmp_path, monkeypatch):
    import hashlib
    import os
    import time

    import tools.audio

    path = tmp_path / "clip.bin"
    path.write_bytes(b"a" * 1000)
    now = time.time_ns()
    os.utime(path, ns=(now - 5 * 10**9, now - 5 * 10**9))  # settled: remembered
    first = content_hash(path)
    assert first == hashlib.sha256(b"a" * 1000).hexdigest()
    real_open = open
    monkeypatch.setattr(tools.audio, "open", lambda *a, **k: pytest.fail("read again"), raising=False)
    assert content_hash(path) == first
    monkeypatch.setattr(tools.audio, "open", real_open, raising=False)
    for byte in b"bc":  # rewritten in place, the same size, within one tick of the clock: hashed each time
        path.write_bytes(bytes([byte]) * 1000)
        os.utime(path, ns=(now, now))
        assert content_hash(path) == hashlib.sha256(bytes([byte]) * 1000).hexdigest()
    monkeypatch.setattr(tools.audio, "HASHED_FILES", 3)
    monkeypatch.setattr(tools.audio, "_hashes", None)
    for k in range(10):
        other = tmp_path / f"{k}.bin"
        other.write_bytes(bytes([k]) * 10)
        os.utime(other, ns=(now - 5 * 10**9, now - 5 * 10**9))
        assert content_hash(other) == hashlib.sha256(bytes([k]) * 10).hexdigest()
        assert len(tools.audio._hashes) <= 3

"""Shared fixtures: audio the tests generate, a small embedded benchmark with its tool records.

Everything is built locally (espeak-ng, fluidsynth, numpy); nothing is downloaded.
"""

from __future__ import annotations

import os

for _key, _value in {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "PYANNOTE_METRICS_ENABLED": "0",
}.items():
    os.environ.setdefault(_key, _value)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

SEVEN = ["asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers"]
CHORD_NOTES = {"C major": (60, 64, 67), "A minor": (57, 60, 64), "F major": (53, 57, 60), "G major": (55, 59, 62)}


@pytest.fixture(scope="session")
def audio_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("audio")


@pytest.fixture(scope="session")
def speech_wav(audio_dir):
    from autagent.data import synth

    text = "The quick brown fox jumps over the lazy dog near the river bank"
    path = audio_dir / "speech.wav"
    synth.write_wav(path, synth.normalise(synth.speech(text, voice="en-us", rate=150)))
    return path, text


@pytest.fixture(scope="session")
def chord_wav(audio_dir):
    """C major, A minor, F major, G major, two seconds each, on a General-MIDI piano."""
    from autagent.data import synth

    names = list(CHORD_NOTES)
    notes = [(2.0 * k, 2.0 * k + 1.95, p, 100) for k, n in enumerate(names) for p in CHORD_NOTES[n]]
    path = audio_dir / "chords.wav"
    synth.write_wav(path, synth.normalise(synth.render_midi(notes, program=0, duration=8.0)))
    return path, names


@pytest.fixture(scope="session")
def click_wav(audio_dir):
    from autagent.data import synth

    bpm, sr = 120.0, synth.SR
    audio = np.zeros(int(10 * sr), dtype=np.float32)
    click = synth.tone(1500, 0.03, decay=120.0)
    for t in np.arange(0.0, 9.9, 60.0 / bpm):
        start = int(t * sr)
        audio[start : start + len(click)] += click
    path = audio_dir / "clicks.wav"
    synth.write_wav(path, synth.normalise(audio))
    return path, bpm


@pytest.fixture(scope="session")
def melody_wav(audio_dir):
    """A sine melody A4, C5, E5, G4 (0.75 s each) at 44.1 kHz stereo: exercises resampling and downmix."""
    import soundfile as sf

    freqs, sr, seconds = [440.0, 523.25, 659.26, 392.0], 44100, 0.75
    t = np.arange(int(sr * seconds)) / sr
    mono = np.concatenate([0.5 * np.sin(2 * np.pi * f * t) for f in freqs]).astype(np.float32)
    path = audio_dir / "melody.wav"
    sf.write(str(path), np.stack([mono, mono], axis=1), sr)
    return path, freqs, seconds


@pytest.fixture(scope="session")
def music_wav(audio_dir):
    from autagent.data import synth

    notes = [(0.5 * i, 0.5 * i + 0.45, 60 + [0, 4, 7, 12, 7, 4, 0, 5][i], 100) for i in range(8)]
    path = audio_dir / "music.wav"
    synth.write_wav(path, synth.normalise(synth.render_midi(notes, program=40, duration=4.0)))
    return path


@pytest.fixture(scope="session")
def quiet_wav(audio_dir):
    """Room tone at about -60 dBFS: quiet, not digitally silent."""
    from autagent.data import synth

    rng = np.random.default_rng(0)
    path = audio_dir / "quiet.wav"
    synth.write_wav(path, (1e-3 * rng.standard_normal(3 * synth.SR)).astype(np.float32))
    return path


from helpers.fixtures import FIXTURES, generator_digest  # noqa: E402, F401 - the tiny benchmark's home


@pytest.fixture(scope="session")
def tiny_bench():
    """The tiny embedded benchmark with all seven tools' records (tests/helpers/fixtures.py; built once
    per machine, by ``make setup``)."""
    from helpers.fixtures import tiny_bench as build

    return build()


@pytest.fixture(scope="session")
def tiny_gemma3_dir(tmp_path_factory):
    """A tiny random Gemma 3 folder (the cascade's model class), built once a session; tests only read it."""
    from autagent.testing.tiny_models import build_tiny_gemma3

    return build_tiny_gemma3(tmp_path_factory.mktemp("tiny_gemma3"))


def pytest_terminal_summary(terminalreporter):
    """How many of the tests against vLLM itself ran (tests/test_vllm.py; they skip without ``.venv-vllm``)."""
    counts = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        reports = terminalreporter.stats.get(outcome, [])
        counts[outcome] = len({r.nodeid for r in reports if "test_vllm.py" in getattr(r, "nodeid", "")})
    if any(counts.values()):
        terminalreporter.write_line("vLLM tests: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n))

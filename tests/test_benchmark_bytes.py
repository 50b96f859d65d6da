"""The embedded benchmark is the same bytes for the same seed, whatever ran before it on the machine.

A fresh clone's first build of the test fixture once differed from every later build in one clip:
espeak-ng's first call on a machine where no PulseAudio client had run created libpulse's runtime
folder, drawing from the C ``rand()`` that espeak-ng's breathy voices take their noise from.  Each
check here runs the generator in two fresh processes, each with a ``$HOME`` of its own: one cold (no
sound client ever ran there), one where espeak-ng already ran once, and compares SHA-256s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed")

ROOT = Path(__file__).resolve().parent.parent
BUILD = """
import json, subprocess, sys
from autagent.data.generator import EmbeddedBenchmarkConfig, generate, recorded_digest
if sys.argv[2] == "warm":  # a sound client ran before: the way every later build on a machine starts
    subprocess.run(["espeak-ng", "--stdout", "warm up"], capture_output=True, check=True)
# seed 8: the first clip is a breathy voice (en-us+f2), whose noise the cold machine's first call shifted
config = EmbeddedBenchmarkConfig(root=sys.argv[1], seed=8, sizes={"train": 3}, kinds=["quote", "intent"], workers=1)
generate(config, progress=False)
print(json.dumps({"digest": recorded_digest(sys.argv[1])}))
"""


def build(tmp_path: Path, name: str, state: str) -> tuple[dict, Path]:
    home, root = tmp_path / f"home-{name}", tmp_path / f"bench-{name}"
    home.mkdir()
    drop = ("PULSE_SERVER", "PULSE_RUNTIME_PATH", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME")
    env = {k: v for k, v in os.environ.items() if k not in drop} | {"HOME": str(home), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", BUILD, str(root), state], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), root


def test_same_seed_same_bytes_cold_or_warm(tmp_path):
    """Fails without synth.NO_SOUND_SERVER: the cold process's first clip differs."""
    cold, cold_root = build(tmp_path, "cold", "cold")
    warm, warm_root = build(tmp_path, "warm", "warm")
    assert cold["digest"] == warm["digest"] is not None
    for name, digest in json.loads((cold_root / "digest.json").read_text())["files"].items():
        assert (warm_root / name).read_bytes() == (cold_root / name).read_bytes(), name
        assert digest == json.loads((warm_root / "digest.json").read_text())["files"][name]
    assert {"train.json", "benchmark.json", "audio/train/train-00000.wav"} <= set(
        json.loads((cold_root / "digest.json").read_text())["files"]
    )


def test_digest_names_every_file_and_changes_with_a_clip(tmp_path):
    from autagent.data.generator import folder_digest, recorded_digest, write_digest

    (tmp_path / "audio").mkdir()
    (tmp_path / "audio" / "a.wav").write_bytes(b"RIFF one")
    (tmp_path / "train.json").write_text("[]")
    (tmp_path / ".complete").write_text("marker")
    assert recorded_digest(tmp_path) is None
    first = write_digest(tmp_path)
    assert recorded_digest(tmp_path) == first
    assert set(folder_digest(tmp_path)["files"]) == {"audio/a.wav", "train.json"}  # not itself, not markers
    assert folder_digest(tmp_path)["sha256"] == first  # digest.json itself does not count
    (tmp_path / "audio" / "a.wav").write_bytes(b"RIFF two")
    assert folder_digest(tmp_path)["sha256"] != first


def test_a_run_records_its_data_digest(tmp_path):
    from autagent.config import load_config
    from autagent.data.generator import write_digest
    from autagent.recipes.run import data_digest

    (tmp_path / "train.json").write_text("[]")
    expected = write_digest(tmp_path)
    config = load_config("experiments/embedded_main.yaml", {"data.benchmark.root": str(tmp_path)})
    assert data_digest(config) == expected
    config = load_config("experiments/embedded_main.yaml", {"data.test": str(tmp_path / "train.json")})
    assert data_digest(config) is None  # dataset files: not the project's to digest

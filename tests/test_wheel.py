"""The files the package's code reads at run time ship in its wheel: a wheel built from this tree holds the
GPU runs the memory plan reads its headroom from and the emotion tool's prosody table, and a plan whose
runs on record are missing fails naming the file instead of assuming a headroom."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autagent.policies.lm.plan import terms
from tools import emotion

ROOT = Path(__file__).resolve().parent.parent
READ_AT_RUN_TIME = (terms.GPU_CHECK_RUNS, emotion.TABLE)
"""Every file outside Python source that the package's code opens from its own folders."""


def test_a_wheel_built_from_the_tree_holds_the_files_the_code_reads(tmp_path):
    source = tmp_path / "tree"  # a copy: an in-place build would leave build/ in the checkout
    for folder in ("autagent", "tools", "rewards"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(source)]
    out = subprocess.run([*build, "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("autagent-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {path.relative_to(ROOT).as_posix() for path in READ_AT_RUN_TIME}
    assert wanted <= names, wanted - names
    assert "autagent/policies/lm/plan/gpu_check.json" in wanted and not any(n.startswith("docs/") for n in names)


def test_the_plan_fails_naming_the_runs_on_record_when_they_are_missing(monkeypatch, tmp_path):
    assert terms.GPU_CHECK_RUNS.is_file()
    monkeypatch.setattr(terms, "GPU_CHECK_RUNS", tmp_path / "gpu_check.json")
    terms.headroom.cache_clear()
    try:
        with pytest.raises(FileNotFoundError, match="gpu_check.json: the GPU runs on record are missing"):
            terms.headroom()
    finally:
        terms.headroom.cache_clear()

"""scripts/mutate.py (``make mutate``): a pass on a tiny project kills its mutants and leaves no working copy
behind in the temporary folder (each pass used to leave a 3.4 GB copy of the project there)."""

from __future__ import annotations

import sys
import tempfile

import pytest
from helpers.scripts import load_script

TINY = "def step(a):\n    return a + 1\n"


@pytest.fixture
def mutate(tmp_path, monkeypatch):
    """The script pointed at a tiny project of one module (three mutants) and its test."""
    module = load_script("mutate")
    project = tmp_path / "project"
    project.mkdir()
    (project / "tiny.py").write_text(TINY)
    (project / "test_tiny.py").write_text("from tiny import step\n\n\ndef test_step():\n    assert step(1) == 2\n")
    monkeypatch.setattr(module, "ROOT", project)
    monkeypatch.setattr(module, "SETS", {"tiny": {"tiny.py": ["test_tiny.py"]}})
    monkeypatch.setattr(module, "PRELOAD", ("pytest",))
    return module


def test_a_pass_counts_its_mutants_and_removes_its_working_copy(mutate, tmp_path, monkeypatch, capsys):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(sys, "argv", ["mutate.py", "--set", "tiny", "--timeout", "60"])
    assert mutate.main() == 0
    out = capsys.readouterr().out
    assert "tiny.py: 3 mutants, 3 killed, 0 survived" in out, out
    assert list(scratch.iterdir()) == []  # the working copy is gone
    assert (mutate.ROOT / "tiny.py").read_text() == TINY  # the project untouched


def test_keep_leaves_the_working_copy_where_it_was_asked(mutate, tmp_path, monkeypatch):
    kept = tmp_path / "kept"
    monkeypatch.setattr(sys, "argv", ["mutate.py", "--set", "tiny", "--keep", str(kept)])
    assert mutate.main() == 0
    assert (kept / "project" / "tiny.py").read_text() == TINY

"""scripts/check_frozen.py: a frozen draw whose setting changed after its first recorded result is a breach;
one whose settings were all fixed before passes; a draw not frozen must say why."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent


def _module(root: Path):
    module = load_script("check_frozen")
    module.ROOT = root
    return module


def _commit(repo: Path, path: str, text: str) -> None:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", *env, "-C", str(repo), "add", path], check=True)
    subprocess.run(["git", *env, "-C", str(repo), "commit", "-qm", path], check=True)


def test_a_setting_changed_after_the_first_result_is_a_breach(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    check = _module(tmp_path)
    draw = {"frozen": True, "settings": ["sweep.yaml"], "record": "record.json"}
    _commit(tmp_path, "sweep.yaml", "seed: 29\n")
    assert check.check({"draws": {"d": draw}})[0] == []  # frozen, nothing recorded yet
    _commit(tmp_path, "record.json", "{}\n")
    breaches, notes = check.check({"draws": {"d": draw}})
    assert breaches == [] and "after every setting" in notes[0]
    _commit(tmp_path, "sweep.yaml", "seed: 29\nmethods: [a_new_baseline]\n")  # chosen after seeing the draw
    breaches, _ = check.check({"draws": {"d": draw}})
    assert len(breaches) == 1 and "sweep.yaml last changed" in breaches[0]
    assert check.check({"draws": {"old": {"frozen": False}}})[0]  # not frozen and no why
    assert not check.check({"draws": {"old": {"frozen": False, "why": "looked at first"}}})[0]


def test_the_projects_own_draws_pass():
    check = _module(ROOT)
    import yaml

    breaches, _ = check.check(yaml.safe_load((ROOT / "docs" / "results" / "frozen.yaml").read_text()))
    assert breaches == []

"""Check from git history that every frozen draw (docs/results/frozen.yaml) was fixed before it was looked at.

For a draw marked ``frozen: true``: each of its ``settings`` files was last changed in a commit that comes
strictly before the commit that first added its ``record`` (its first recorded result).  A draw with no
record yet passes (it is frozen and not yet evaluated) and is said so.  A draw marked ``frozen: false``
must say ``why``.  Exit 1 with one line per breach; run by ``make lint``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "docs" / "results" / "frozen.yaml"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def first_commit(path: str) -> str | None:
    """The commit that first added ``path`` (None while it is not committed)."""
    added = git("log", "--diff-filter=A", "--format=%H", "--", path).splitlines()
    return added[-1] if added else None


def last_commit(path: str) -> str | None:
    return git("log", "-1", "--format=%H", "--", path) or None


def strictly_before(a: str, b: str) -> bool:
    """Whether commit ``a`` is an ancestor of ``b`` and not ``b`` itself."""
    if a == b:
        return False
    return subprocess.run(["git", "merge-base", "--is-ancestor", a, b], cwd=ROOT).returncode == 0


def check(registry: dict) -> tuple[list[str], list[str]]:
    """(breaches, notes) of every draw in ``registry``."""
    breaches, notes = [], []
    for name, draw in (registry.get("draws") or {}).items():
        if not draw.get("frozen"):
            if not draw.get("why"):
                breaches.append(f"{name}: not frozen and no why: say what was chosen after it was seen")
            continue
        record = draw.get("record")
        recorded = first_commit(record) if record else None
        if recorded is None:
            notes.append(f"{name}: frozen, no result recorded yet")
            continue
        for path in draw.get("settings") or []:
            changed = last_commit(path)
            if changed is None:
                breaches.append(f"{name}: its setting file {path} is not in git")
            elif not strictly_before(changed, recorded):
                breaches.append(
                    f"{name}: {path} last changed at {changed[:7]}, not before the first recorded result "
                    f"({record} at {recorded[:7]}): the draw was looked at before this setting was fixed"
                )
        notes.append(f"{name}: frozen; first result at {recorded[:7]}, after every setting")
    return breaches, notes


def main() -> int:
    breaches, notes = check(yaml.safe_load(REGISTRY.read_text()) or {})
    for line in notes:
        print(f"frozen draws: {line}")
    for line in breaches:
        print(f"frozen draws: BREACH {line}", file=sys.stderr)
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())

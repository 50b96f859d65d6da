"""The README's ``select`` example asks a question its clip was made for (issue 63, item 2): it asked "How
fast is it?" of ``test-00000.wav``, a speech clip made for an emotion question (tempo 148.1 BPM, the
choices 90 and 120 BPM).  The clip's row is drawn again as ``make train`` draws it (one row: every row is a
function of the seed, the split and its index) and must be a tempo item whose tempo is among the choices."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _select_example() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    line = next(line for line in readme.splitlines() if line.startswith("autagent select ") and " --audio " in line)
    return shlex.split(line, comments=True)


def test_the_readmes_select_example_asks_its_clip_what_it_was_made_for(tmp_path):
    from autagent.data.generator import KINDS, _make_one

    argv = _select_example()
    clip, question = argv[argv.index("--audio") + 1], argv[argv.index("--question") + 1]
    choices = argv[argv.index("--choices") + 1 : next(i for i, w in enumerate(argv) if w == "--explain")]
    benchmark = yaml.safe_load((ROOT / "experiments" / "embedded_main.yaml").read_text())["data"]["benchmark"]
    split, index = re.fullmatch(r".*/audio/(\w+)/\1-(\d+)\.wav", clip).groups()
    assert clip.startswith(benchmark["root"])  # make train's benchmark
    row = _make_one((str(tmp_path), split, int(index), benchmark["seed"], list(KINDS), (0.0, [])))
    assert "fast" in question and row["category"] == "tempo_bpm", row
    (bpm,) = re.findall(r"\d+", row["answer"])
    assert f"{bpm} BPM" in choices and len(choices) >= 2, (row["answer"], choices)

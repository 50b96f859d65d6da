"""A clip longer than what is heard is said (issue 63, item 7): ``select`` and ``answer`` on a long clip
heard its first 30 s and said nothing.  Now one line on stderr names its length and what is heard, and
the JSON reply carries ``tools_heard_s`` (as the service's does); a clip heard whole says nothing.
Every test here fails on 0169c2d."""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest
import soundfile as sf
from helpers.serve import router_plugin

from autagent.cli import main

QUESTION = ["--question", "How fast is it?"]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("long")
    t = np.arange(16000 * 40) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    sf.write(str(folder / "long.wav"), tone, 16000)
    sf.write(str(folder / "short.wav"), tone[: 16000 * 5], 16000)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(folder / "long.wav"), str(folder / "long.m4a")])
    return folder


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("long-plugin") / "quiet", [-5.0] * 6)


def test_select_says_a_long_clip_is_heard_in_part(clips, quiet, capsys):
    assert main(["select", "--plugin", str(quiet), "--audio", str(clips / "long.wav"), *QUESTION]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["tools_heard_s"] == 30.0
    (note,) = [line for line in err.splitlines() if "note" in line]
    assert note == "autagent: note: long.wav is 40.0 s long: only its first 30 s are heard (tools.max_seconds)"
    assert main(["select", "--plugin", str(quiet), "--audio", str(clips / "short.wav"), *QUESTION]) == 0
    out, err = capsys.readouterr()
    assert "tools_heard_s" not in json.loads(out) and "note" not in err


def test_a_format_without_a_length_in_its_header_is_said_too(clips):
    from tools.audio import length_past

    assert length_past(clips / "long.m4a", 30.0) == math.inf and length_past(clips / "long.m4a", 50.0) is None
    assert length_past(clips / "long.wav", 30.0) == 40.0 and length_past(clips / "short.wav", 30.0) is None


def test_select_batch_marks_each_long_clip(clips, quiet, capsys):
    argv = ["select", "--plugin", str(quiet), "--batch", str(clips), *QUESTION]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    heard = {
        json.loads(line)["audio"].rsplit("/", 1)[1]: json.loads(line).get("tools_heard_s") for line in out.splitlines()
    }
    assert heard == {"long.wav": 30.0, "long.m4a": 30.0, "short.wav": None}
    assert "2 of 3 clips are longer than 30 s" in err


def test_answer_says_it_too(clips, quiet, tmp_path, capsys):
    argv = ["answer", "--plugin", str(quiet), "--audio", str(clips / "long.wav"), *QUESTION]
    argv += ["--choices", "90 BPM", "120 BPM", "--reasoner", "embedded", "--set", f"answer_cache_dir={tmp_path}"]
    main(argv)
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1])["tools_heard_s"] == 30.0
    assert "long.wav is 40.0 s long: only its first 30 s are heard" in err

"""One rule for bad input on every command: a missing, empty or non-audio clip, an unknown tool, a wrong
key or value is one line ``autagent: error: ...`` with exit code 2, nothing on stdout, and nothing
expensive started first (no plugin loaded, no tool pool, no Ray)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from autagent.cli import main


@pytest.fixture()
def clips(tmp_path):
    """A good clip, a missing one, an empty file, a text file named .wav, a plugin path and a dataset."""
    good = tmp_path / "good.wav"
    sf.write(str(good), (0.3 * np.sin(np.arange(16000) / 5)).astype(np.float32), 16000)
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "text.wav").write_text("not audio at all\n")
    rows = [{"audio": "good.wav", "question": "How fast?", "choices": ["90 BPM", "120 BPM"]}, {"audio": "text.wav"}]
    (tmp_path / "batch.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "old.yaml").write_text("name: old\ntable: {enabled: true}\n")  # keys from before issue 52
    (tmp_path / "old_grpo.yaml").write_text("grpo: {steps: 3, loss_type: dapo}\n")
    sweep = "base: experiments/embedded_main.yaml\nseeds: [0]\nvariants: {small: {table.budget: 10}}\n"
    (tmp_path / "old_sweep.yaml").write_text(sweep)
    return {
        "good": str(good),
        "missing": str(tmp_path / "missing.wav"),
        "empty": str(tmp_path / "empty.wav"),
        "text": str(tmp_path / "text.wav"),
        "plugin": str(tmp_path / "no-plugin"),
        "batch": str(tmp_path / "batch.jsonl"),
        "dir": str(tmp_path),
        "old": str(tmp_path / "old.yaml"),
        "old_grpo": str(tmp_path / "old_grpo.yaml"),
        "old_sweep": str(tmp_path / "old_sweep.yaml"),
    }


@pytest.fixture()
def nothing_starts(monkeypatch):
    """Loading a plugin, building a tool pool or starting Ray fails the test: the input is checked first."""
    import ray

    import autagent.api
    import autagent.oneoff
    import autagent.recipes.evaluate
    import tools.pool

    def started(*args, **kwargs):
        raise AssertionError("started before checking its input")

    for module in (autagent.api, autagent.oneoff, autagent.recipes.evaluate):  # where it is called from
        monkeypatch.setattr(module, "load", started)
    monkeypatch.setattr(tools.pool.ToolPool, "__init__", started)
    monkeypatch.setattr(ray, "init", started)


QUESTION = ["--question", "How fast is it?"]
CASES = {
    "select, a missing clip": (["select", "--plugin", "{plugin}", "--audio", "{missing}", *QUESTION], "file not found"),
    "select, an empty clip": (["select", "--plugin", "{plugin}", "--audio", "{empty}", *QUESTION], "file is empty"),
    "select, a text file": (["select", "--plugin", "{plugin}", "--audio", "{text}", *QUESTION], "cannot decode audio"),
    "select, one choice": (
        ["select", "--plugin", "{plugin}", "--audio", "{good}", *QUESTION, "--choices", "90 BPM"],
        "at least two",
    ),
    "select, no plugin": (["select", "--plugin", "{plugin}", "--audio", "{good}", *QUESTION], "not a plugin"),
    "select --batch, a bad row": (["select", "--plugin", "{plugin}", "--batch", "{batch}"], "row 1"),
    "select --batch, a folder, no question": (["select", "--plugin", "{plugin}", "--batch", "{dir}"], "--question"),
    "answer, a text file": (
        ["answer", "--plugin", "{plugin}", "--audio", "{text}", *QUESTION, "--choices", "a", "b"],
        "cannot decode audio",
    ),
    "answer, a missing clip": (
        ["answer", "--plugin", "{plugin}", "--audio", "{missing}", *QUESTION, "--choices", "a", "b"],
        "file not found",
    ),
    "answer, one choice": (
        ["answer", "--plugin", "{plugin}", "--audio", "{good}", *QUESTION, "--choices", "a"],
        "at least two",
    ),
    "answer, no plugin": (
        ["answer", "--plugin", "{plugin}", "--audio", "{good}", *QUESTION, "--choices", "a", "b"],
        "not a plugin",
    ),
    "tools run, an unknown tool": (["tools", "run", "{good}", "--tools", "tempoo"], "unknown tool 'tempoo'"),
    "tools run, a missing clip": (["tools", "run", "{missing}", "--executor", "local"], "file not found"),
    "tools run, a text file": (["tools", "run", "{text}"], "cannot decode audio"),
    "tools precompute, a missing file": (["tools", "precompute", "{missing}.json"], "file not found"),
    "eval, no plugin": (["eval", "--dataset", "{missing}.json", "--plugin", "{plugin}"], "not a plugin"),
    "eval, a missing dataset": (["eval", "--dataset", "{missing}.json"], "file not found"),
    "eval, a wrong key": (["eval", "--set", "tools.enabeld=[asr]"], "unknown field tools.enabeld"),
    "train, a wrong kind": (["train", "--set", "policy.kind=lmm"], "got 'lmm'"),
    # settings one policy reads moved to its section (issue 52): the old key names the new one
    "train, an old table key in --set": (
        ["train", "--set", "table.crossval.folds=2"],
        "--set table.crossval.folds: moved to policy.router.table.crossval.folds",
    ),
    "train, an old grpo key in --set": (["train", "--set", "grpo.credit=tool"], "moved to policy.router.credit"),
    "train, the old table section": (["train", "--config", "{old}"], "table moved to policy.router.table"),
    "eval, an old grpo key": (["eval", "--config", "{old_grpo}"], "grpo.loss_type moved to policy.lm.loss_type"),
    "sweep, an old key in a variant": (
        ["sweep", "{old_sweep}"],
        "variant small: table.budget moved to policy.router.table.budget",
    ),
    "data validate, a missing file": (["data", "validate", "{missing}.json"], "file not found"),
    "adapt, no plugin": (["adapt", "--plugin", "{plugin}", "--reasoner", "cascade", "--out", "x"], "not a plugin"),
    "check-selection, no plugin": (["check-selection", "--plugin", "{plugin}"], "not a plugin"),
    "plugin sign, no plugin": (["plugin", "sign", "{dir}", "--key", "{missing}.pem"], "not a plugin"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_2_before_anything_starts(case, clips, nothing_starts, capsys):
    argv, says = CASES[case]
    assert main([a.format(**clips) for a in argv]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1, err
    assert lines[0].startswith("autagent: error: ") and says in lines[0], lines[0]
    assert "Traceback" not in err


def test_the_closing_quote_of_a_bad_value_is_kept(capsys):
    assert main(["train", "--set", "policy.kind=lmm"]) == 2
    assert capsys.readouterr().err.strip().endswith("got 'lmm'")


def test_help_names_every_subcommand_and_has_no_rst_markup(capsys):
    from autagent.cli import build_parser

    parser = build_parser()
    text = parser.format_help()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    description = parser.description
    assert all(name in description for name in commands) and "``" not in text
    assert not [name for name, sub in commands.items() if "``" in sub.format_help()]  # serve's docstring help too
    for name in ("select", "answer"):
        helps = {a.dest: a.help for a in commands[name]._actions}
        assert all(helps[d] for d in ("plugin", "audio", "question", "profile", "choices")), name
        assert "``" not in commands[name].format_help()
    choices = [next(a for a in commands[n]._actions if a.dest == "choices") for n in ("select", "answer")]
    assert choices[0].nargs == choices[1].nargs == "+"


def test_the_command_line_starts_without_a_third_party_import():
    """autagent.cli imports the package's modules inside each subcommand (its docstring says why): importing it
    loads the standard library and ``autagent`` alone, so ``--help`` and a bad flag answer at once."""
    import subprocess
    import sys

    code = "import sys, autagent.cli; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(run.stdout.split())
    third = {m for m in loaded - set(sys.stdlib_module_names) if not m.startswith("_")} - {"autagent", "sitecustomize"}
    assert not third, third

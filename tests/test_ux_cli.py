"""What a new user meets on the command line (issue 63, items 2 and 9): a mistyped flag or subcommand is
named with the one it resembles; ``autagent mcp`` started by hand says it waits on stdio; ``answer``'s default
reasoner is a real model where one is installed, and the embedded simulator says it is one on a clip that is
not from its benchmark; a log line never lands inside a progress bar."""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from autagent.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _error_of(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argv, says",
    [
        # the typo of a required flag was reported as that flag missing, the typo never named
        (["select", "--plugn", "p", "--audio", "a.wav", "--question", "q"], "(--plugn: did you mean --plugin?)"),
        (["select", "--plugin", "p", "--audio", "a.wav", "--max-tool", "2"], "(--max-tool: did you mean --max-tools?)"),
        (["tools", "run", "a.wav", "--profil", "embedded"], "(--profil: did you mean --profile?)"),
        (["selct", "--plugin", "p"], "(selct: did you mean select?)"),
        (["answer", "--reasoner", "cascde"], "(cascde: did you mean cascade?)"),
    ],
)
def test_a_typo_is_named_with_the_flag_or_command_it_resembles(argv, says, capsys):
    line = _error_of(argv, capsys)
    assert line.endswith(says), line


def test_a_flag_like_nothing_gets_no_suggestion(capsys):
    line = _error_of(["select", "--plugin", "p", "--zzzzqqq"], capsys)
    assert "unrecognized arguments: --zzzzqqq" in line and "did you mean" not in line


def test_mcp_on_stdio_says_on_stderr_that_it_waits_for_a_client_and_keeps_stdout_for_the_protocol(tmp_path):
    """Started by hand, ``autagent mcp`` printed nothing and looked hung; stdout is the protocol's."""
    done = subprocess.run(
        [sys.executable, "-m", "autagent.cli", "mcp", "--set", f"tools.cache_dir={tmp_path}"],
        stdin=subprocess.DEVNULL,  # the client hangs up at once: the server ends
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("autagent mcp:")]
    assert len(lines) == 1 and "waiting on stdio for an MCP client" in lines[0], done.stderr
    assert done.stdout == ""


# -- the default reasoner and the simulator's notice ------------------------------------------------------


@pytest.fixture()
def fresh_notice(monkeypatch):
    """The notice's once-per-process memory, emptied for this test."""
    from autagent.reasoners import simulator_notice

    monkeypatch.setattr(simulator_notice, "_warned", [])
    return simulator_notice


@pytest.fixture(scope="module")
def own_clip(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("own") / "bear.wav"
    sf.write(str(path), (0.3 * np.sin(np.arange(32000) / 7)).astype(np.float32), 16000)
    return path


def test_a_benchmark_clip_is_told_from_a_users_clip_and_from_a_copy_of_it(tiny_bench, own_clip, tmp_path):
    from autagent.reasoners.simulator_notice import from_benchmark

    clip = tiny_bench["test"][0].audio
    copy = shutil.copy(clip, tmp_path / "test-00000.wav")  # its bytes, outside a benchmark folder
    assert from_benchmark(clip) and not from_benchmark(own_clip) and not from_benchmark(copy)


def test_the_simulator_warns_once_on_a_users_clip_and_never_on_its_benchmarks(
    fresh_notice, tiny_bench, own_clip, caplog
):
    caplog.set_level(logging.WARNING)
    assert not fresh_notice.notice(tiny_bench["test"][0].audio)
    assert fresh_notice.notice(own_clip)
    assert not fresh_notice.notice(own_clip)  # once per process
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "bear.wav is not a clip of the embedded benchmark" in warning
    assert "simulator" in warning and "--reasoner cascade" in warning


@pytest.mark.slow  # MiniLM and YAMNet load (about 17 s)
def test_the_embedded_reasoner_itself_says_so_where_it_answers_a_users_clip(fresh_notice, own_clip, caplog):
    """``serve --reasoner embedded`` answers through the reasoner, not through ``answer``'s own check."""
    from autagent.data.sample import Sample
    from autagent.reasoners.embedded import EmbeddedReasoner

    caplog.set_level(logging.WARNING)
    sample = Sample(id="own", audio=str(own_clip), question="What animal?", choices=("a dog", "a bear"), answer="")
    (reply,) = EmbeddedReasoner().answer_many([(sample, None)])
    assert reply.text in sample.choices
    assert ["bear.wav is not a clip" in r.getMessage() for r in caplog.records] == [True]


class _Args:
    def __init__(self, config=None, set_=None):
        self.config, self.set = config, set_


def test_answers_default_reasoner_is_the_cascade_where_it_is_at_hand_else_the_simulator(capsys):
    from autagent.cli.plugins import default_reasoner
    from autagent.config import load_config

    config = load_config()
    for found, expected in (("converted", "cascade"), ("installed", "cascade"), (None, "embedded")):
        assert default_reasoner(_Args(), config, at_hand=lambda cascade, found=found: found) == expected
    assert "converted once into" in capsys.readouterr().err  # the minute it costs the first time is said
    config = load_config(None, {"reasoner.kind": "openai"})  # a config or --set that names one is kept
    assert default_reasoner(_Args(set_=["reasoner.kind=openai"]), config) == "openai"


def test_the_cascade_is_at_hand_once_converted_into_the_user_cache(tmp_path):
    from autagent.reasoners.cascade import CascadeReasonerConfig
    from autagent.reasoners.simulator_notice import cascade_at_hand

    converted = tmp_path / "cascade" / "converted"
    converted.mkdir(parents=True)
    (converted / "source.json").write_text('{"sha256": "ab"}')
    assert cascade_at_hand(CascadeReasonerConfig(cache_dir=str(tmp_path / "cascade"))) == "converted"
    assert cascade_at_hand(CascadeReasonerConfig(model_dir=str(tmp_path / "none"))) is None


@pytest.fixture(scope="module")
def quiet_plugin(tmp_path_factory) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.serve import router_plugin

    return router_plugin(tmp_path_factory.mktemp("plugin") / "p", [-3.0] * 6)  # calls no tool


def _answer(argv, cwd) -> subprocess.CompletedProcess:
    """``autagent answer`` as a user runs it: its own process (the CLI's logging on stderr), from ``cwd``."""
    command = [sys.executable, "-m", "autagent.cli", "answer", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.slow  # a plugin's encoders and a reasoner load (about 30 s)
def test_answer_on_a_users_clip_with_the_simulator_says_so_before_answering(quiet_plugin, own_clip, tmp_path):
    argv = ["--plugin", str(quiet_plugin), "--audio", str(own_clip), "--question", "What animal is it?"]
    argv += ["--choices", "a dog", "a bear", "--reasoner", "embedded", "--set", f"answer_cache_dir={tmp_path}"]
    done = _answer(argv, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("is not a clip of the embedded benchmark") == 1
    assert done.stderr.index("not a clip of the embedded benchmark") < done.stderr.index("asking it")


@pytest.mark.slow  # the cascade's Gemma 3 270M loads (make setup converted it into the user cache)
def test_answer_without_reasoner_asks_the_cascade_where_make_setup_installed_it(quiet_plugin, own_clip, tmp_path):
    from autagent.reasoners.cascade import CascadeReasonerConfig
    from autagent.reasoners.simulator_notice import cascade_at_hand

    if cascade_at_hand(CascadeReasonerConfig()) != "converted":
        pytest.skip("make setup has not converted the cascade's model into the user cache")
    argv = ["--plugin", str(quiet_plugin), "--audio", str(own_clip), "--question", "What animal is it?"]
    done = _answer([*argv, "--choices", "a dog", "a bear", "--set", f"answer_cache_dir={tmp_path}"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "loading the cascade reasoner" in done.stderr and "not a clip of the embedded benchmark" not in done.stderr
    assert "converted once" not in done.stderr  # from another folder, the user cache's model: not converted again


# -- log lines and progress bars ------------------------------------------------------------------------


def test_a_log_line_written_while_a_bar_is_drawn_starts_on_a_line_of_its_own():
    """faster-whisper's "VAD filter removed ..." was glued to the tools' bar (``| 0/54 [00:00<?]autagent: ...``)."""
    from tqdm import tqdm

    from autagent.data.progress import keep_logs_off_bars

    stream = io.StringIO()
    logger = logging.getLogger("test_ux_cli.bars")
    logger.propagate, logger.handlers = False, []
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("autagent: %(message)s"))
    logger.addHandler(handler)
    stream_is_stderr = sys.stderr
    try:
        sys.stderr = stream  # the CLI's handler writes on stderr: keep_logs_off_bars swaps those
        handler.stream = sys.stderr
        keep_logs_off_bars(logger)
        bar = tqdm(total=3, desc="tools", file=stream, mininterval=0, ncols=60)
        bar.update(1)
        logger.warning("VAD filter removed 00:00.000 of audio")
        bar.update(1)
        bar.close()
    finally:
        sys.stderr = stream_is_stderr
    text = stream.getvalue()
    before = text[: text.index("autagent: VAD filter")]
    assert before.endswith(("\n", "\r")), repr(text)  # the bar was cleared first, not written after
    assert "tools" in text.split("autagent: VAD filter")[1]  # and drawn again below the line


def test_the_cli_quiets_faster_whispers_per_clip_info_lines():
    from autagent.data.progress import keep_logs_off_bars

    whisper = logging.getLogger("faster_whisper")
    level = whisper.level
    try:
        whisper.setLevel(logging.NOTSET)  # as faster-whisper leaves it: the CLI's root (INFO) decides
        keep_logs_off_bars(logging.getLogger("test_ux_cli.none"))
        assert whisper.level == logging.WARNING
    finally:
        whisper.setLevel(level)

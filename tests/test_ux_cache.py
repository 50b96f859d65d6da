"""Caches under one per-user folder, the same from every working directory (issue 63, item 6): a command
run from another folder once converted the cascade's Gemma again (52 s, another 785 MB) and computed the
tools' records and the answers again.  And a plugin path that does not exist says "not found"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from autagent.cli import main
from autagent.config import load_config, save_config, to_dict
from autagent.data.user_cache import ENV, cache_path, cache_root, portable


@pytest.fixture()
def user_cache(tmp_path, monkeypatch) -> Path:
    """A private per-user cache folder for this test (``$AUTAGENT_CACHE_DIR``)."""
    folder = tmp_path / "user-cache"
    monkeypatch.setenv(ENV, str(folder))
    return folder


def test_the_cache_folder_is_the_variable_then_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_root() == tmp_path / "home" / ".cache" / "autagent"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "autagent"
    monkeypatch.setenv(ENV, str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


def test_every_cache_default_is_the_same_folder_from_any_working_directory(user_cache, tmp_path, monkeypatch):
    seen = []
    for cwd in (tmp_path, tmp_path / "elsewhere"):
        cwd.mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        config = load_config(None, {"eval_reasoner": {"kind": "cascade"}})
        seen.append(
            (
                config.tools.cache_dir,
                config.answer_cache_dir,
                config.reasoner.cascade.cache_dir,
                config.eval_reasoner.cascade.cache_dir,
                config.eval.agentic.audio_dir,
            )
        )
    assert (
        seen[0]
        == seen[1]
        == tuple(str(user_cache / name) for name in ("tools", "answers", "cascade", "cascade", "chat-audio"))
    )


def test_the_experiments_cache_paths_are_the_users_cache_and_a_path_of_ones_own_is_kept(user_cache, tmp_path):
    config = load_config(Path(__file__).resolve().parents[1] / "experiments" / "cascade_main.yaml")
    assert config.tools.cache_dir == str(user_cache / "tools")  # `cache_dir: .cache/tools` in the file
    assert config.reasoner.cascade.cache_dir == str(user_cache / "cascade")
    mine = load_config(None, {"tools.cache_dir": "mine", "answer_cache_dir": str(tmp_path / "a")})
    assert mine.tools.cache_dir == "mine" and mine.answer_cache_dir == str(tmp_path / "a")


def test_a_recorded_config_names_the_cache_portably_and_reads_back_to_the_readers_cache(user_cache, tmp_path):
    config = load_config()
    recorded = to_dict(config)
    assert recorded["tools"]["cache_dir"] == ".cache/tools" and recorded["answer_cache_dir"] == ".cache/answers"
    assert recorded["reasoner"]["cascade"]["cache_dir"] == ".cache/cascade"
    save_config(config, tmp_path / "config.yaml")
    assert str(user_cache) not in (tmp_path / "config.yaml").read_text()  # no one's home in a run or plugin
    assert load_config(tmp_path / "config.yaml").tools.cache_dir == str(user_cache / "tools")
    assert portable("/elsewhere/x") == "/elsewhere/x" and cache_path(".cache/x") == str(user_cache / "x")


def test_cache_dir_flag_sets_every_cache_of_the_commands_config(tmp_path, monkeypatch):
    from autagent.cli import build_parser
    from autagent.cli.common import config_of

    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    argv = ["answer", "--plugin", "p", "--audio", "a.wav", "--question", "q", "--choices", "x", "y"]
    try:
        config = config_of(build_parser().parse_args([*argv, "--cache-dir", "c"]))
    finally:
        os.environ.pop(ENV, None)  # the flag sets it for the command's process (and what it starts)
    assert config.tools.cache_dir == str(tmp_path / "c" / "tools")
    assert config.answer_cache_dir == str(tmp_path / "c" / "answers")
    assert config.reasoner.cascade.cache_dir == str(tmp_path / "c" / "cascade")


@pytest.mark.slow  # a tool runs (librosa's import and its first call: about 15 s)
def test_cache_dir_flag_puts_a_commands_caches_under_it_from_another_folder(tmp_path, monkeypatch, capsys):
    """``tools precompute`` prints where its records went: under --cache-dir, whatever the working directory."""
    monkeypatch.delenv(ENV, raising=False)
    clip = tmp_path / "clip.wav"
    sf.write(str(clip), (0.3 * np.sin(np.arange(8000) / 5)).astype(np.float32), 16000)
    rows = [{"id": "a", "audio_id": str(clip), "question": "q?", "choices": ["x", "y"], "answer": "x", "task": "sound"}]
    (tmp_path / "mmau.json").write_text(json.dumps(rows))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    argv = ["tools", "precompute", str(tmp_path / "mmau.json"), "--tools", "tempo", "--cache-dir", "../c"]
    try:
        assert main([*argv, "--set", "tools.executor=local"]) == 0
    finally:
        os.environ.pop(ENV, None)  # the flag set it for the command's process, this test's
    summary = json.loads(capsys.readouterr().out)
    assert summary["cache_dir"] == str(tmp_path / "c" / "tools") and summary["computed"] == 1
    assert any((tmp_path / "c" / "tools").rglob("*.json"))


def test_make_setups_conversion_fills_the_folder_every_command_reads(tmp_path):
    """``make setup`` runs ``python -m autagent.reasoners.cascade.weights .cache/cascade``: into the user cache,
    where ``answer --reasoner cascade`` looks from any folder (a converted folder is found, not made again)."""
    converted = tmp_path / "user-cache" / "cascade" / "converted"
    converted.mkdir(parents=True)
    (converted / "source.json").write_text(json.dumps({"sha256": "0123456789abcdef"}))
    env = {**os.environ, ENV: str(tmp_path / "user-cache")}
    command = [sys.executable, "-m", "autagent.reasoners.cascade.weights", ".cache/cascade"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"cascade weights: {converted} (0123456789ab)"
    assert not (tmp_path / ".cache").exists()


def test_a_plugin_path_that_does_not_exist_says_not_found_and_where_it_looked(tmp_path, monkeypatch, capsys):
    clip = tmp_path / "clip.wav"
    sf.write(str(clip), (0.3 * np.sin(np.arange(16000) / 5)).astype(np.float32), 16000)
    monkeypatch.chdir(tmp_path)
    assert main(["select", "--plugin", "runs/embedded_main/plugin", "--audio", str(clip), "--question", "q"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"autagent: error: runs/embedded_main/plugin: not a plugin: folder not found in {tmp_path}"
    (tmp_path / "file").write_text("x")
    assert main(["select", "--plugin", "file", "--audio", str(clip), "--question", "q"]) == 2
    assert "not a plain directory" in capsys.readouterr().err  # a path that exists but is no folder


def test_the_yaml_of_a_run_folder_keeps_other_paths_as_given(user_cache, tmp_path):
    config = load_config(None, {"data.test": "data/x.json"})
    save_config(config, tmp_path / "c.yaml")
    assert yaml.safe_load((tmp_path / "c.yaml").read_text())["data"]["test"] == "data/x.json"


class _Built(Exception):
    """Raised by a stand-in for the service's build: the options it was given, nothing started."""


def test_serve_and_mcp_keep_uploaded_clips_in_the_user_cache_from_any_folder(user_cache, tmp_path, monkeypatch):
    import autagent.serve
    import autagent.serve.mcp_server

    def caught(*args, **kwargs):
        raise _Built([a for a in (*args, *kwargs.values()) if hasattr(a, "audio_dir")][0].audio_dir)

    monkeypatch.setattr(autagent.serve, "build", caught)
    monkeypatch.setattr(autagent.serve.mcp_server, "serve_mcp", caught)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(_Built) as serve:
        main(["serve", "--reasoner", "embedded"])
    with pytest.raises(_Built) as mcp:
        main(["mcp", "--transport", "http"])
    assert serve.value.args[0] == str(user_cache / "serve-audio") and mcp.value.args[0] == str(user_cache / "mcp-audio")

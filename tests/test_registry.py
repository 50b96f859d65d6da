"""The open tool library: the registry, a user's tool from ``tools.extra`` trained into a plugin,
a plugin refused where its tools are missing, and ``autagent tools list``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml

from autagent.cli import main

CUSTOM_TOOL = textwrap.dedent("""
    import numpy as np
    from tools.base import Backend, ToolSpec, package_version

    def loudness(model, audio, settings):
        frames = audio.samples[: len(audio.samples) // 1600 * 1600].reshape(-1, 1600)
        db = 20 * np.log10(np.sqrt((frames ** 2).mean(axis=1)) + 1e-9)
        return {"loudest_db": round(float(db.max()), 1), "quietest_db": round(float(db.min()), 1)}

    LOUDNESS = ToolSpec(
        id="loudness", description="Measures how loud the clip is over time, in decibels.", domains=("sound",),
        output="{loudest_db, quietest_db}",
        backends={"embedded": Backend(name="rms-db", library_version=package_version("numpy"), sample_rate=16000,
                                      load=lambda settings: None, infer=loudness)})
""")


@pytest.fixture()
def custom_module(tmp_path, monkeypatch):
    (tmp_path / "my_tools.py").write_text(CUSTOM_TOOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_registry_holds_the_papers_tools_then_speakers():
    from tools import PAPER_TOOLS, get_tool, registered, resolve

    ids = [s.id for s in registered()]
    assert ids[:7] == ["asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers"]
    assert PAPER_TOOLS == tuple(ids[:6]) and resolve(None) == PAPER_TOOLS
    assert [get_tool(t).label for t in ids[:7]] == [f"T{i} {t}" for i, t in enumerate(ids[:7], start=1)]
    from tools.registry import label_of

    # plots and reports label a tool by its label, and an old record's unknown tool by its id
    assert label_of("tempo") == "T4 tempo" and label_of("whisper") == "whisper"
    from tools.registry import ToolRegistryError

    with pytest.raises(ToolRegistryError, match="unregistered tools \\['whisper'\\]"):
        resolve(["asr", "whisper"])


def test_a_custom_tool_is_listed_trained_on_and_exported(custom_module, tiny_bench, tmp_path, capsys):
    assert main(["tools", "list", "--set", "tools.extra=[my_tools:LOUDNESS]"]) == 0
    listing = json.loads(capsys.readouterr().out)
    row = next(t for t in listing["tools"] if t["id"] == "loudness")
    assert row["origin"] == "tools.extra my_tools:LOUDNESS" and not row["enabled"]

    enabled = ["asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers", "loudness"]
    config = {
        "name": "custom",
        "output_dir": str(tmp_path / "runs"),
        "answer_cache_dir": str(tmp_path / "answers"),
        "data": {"train": str(tiny_bench["paths"]["train"]), "test": str(tiny_bench["paths"]["test"]), "limit_test": 8},
        "tools": {
            "executor": "local",
            "cache_dir": str(tiny_bench["cache"]),
            "enabled": enabled,
            "extra": ["my_tools:LOUDNESS"],
        },
        "grpo": {"steps": 2, "batch_size": 8},
        "eval": {"methods": ["no_tool", "single:loudness", "policy"]},
        "logging": {"wandb": False, "progress": False},
    }
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(path)]) == 0
    run = tmp_path / "runs" / "custom"
    manifest = json.loads((run / "plugin" / "manifest.json").read_text())
    assert [t["id"] for t in manifest["tools"]] == enabled and manifest["tools"][-1]["backend"] == "rms-db"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["methods"]["single:loudness"]["tool_calls"]["loudness"] == 8
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert "tool_share/loudness" in log[0]
    record = json.loads(next((tiny_bench["cache"] / "loudness").rglob("*.json")).read_text())
    assert set(record["output"]) == {"loudest_db", "quietest_db"}

    # Without the custom tool registered, the plugin is refused, naming the tool.
    code = f"from autagent.api import load; load({str(run / 'plugin')!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PATH": "/usr/bin"})
    assert out.returncode != 0 and "needs tools that are not installed here: loudness" in out.stderr


def test_a_plugin_never_selects_a_tool_it_was_not_trained_with(tiny_bench, tmp_path):
    from autagent.api import load
    from autagent.plugin.manifest import PluginTarget
    from autagent.policies.router.export import RouterParts, export_router
    from autagent.policies.router.features import Featurizer
    from autagent.policies.router.model import Router, RouterConfig

    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(init_bias=5.0), 2)  # calls every tool it has
    path = export_router(
        PluginTarget(tmp_path / "p", ("tempo", "pitch"), "embedded", {}, 30.0, {}), RouterParts(router, featurizer)
    )
    plugin = load(path)
    sample = tiny_bench["test"][0]
    assert plugin.select(sample.audio, sample.question, sample.choices) == ["tempo", "pitch"]

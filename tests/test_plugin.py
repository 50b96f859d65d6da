"""Plugin export and loading: round trip, content hash, tool-manifest refusal, the CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from autagent import plugin as plugin_mod
from autagent.policies.router import Featurizer, Router, RouterConfig


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(1)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig())
    with torch.no_grad():
        router.net[-1].bias.copy_(torch.tensor([3.0, -3.0, -3.0, 3.0, -3.0, -3.0]))
    path = plugin_mod.export_router(tmp_path_factory.mktemp("p") / "plugin", router, featurizer, "embedded", {}, 30.0,
                                    {"name": "test"}, {"accuracy": 0.5})
    return path, router, featurizer


def _copy(src, tmp_path):
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def test_round_trip_selects_like_the_trained_router(exported, click_wav):
    path, router, featurizer = exported
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["policy"] == "router" and [t["id"] for t in manifest["tools"]][0] == "asr"
    assert {"text", "audio"} <= set(manifest["encoders"]) and manifest["metrics"] == {"accuracy": 0.5}
    assert not list(path.glob("*.bin")) and not list(path.glob("*.pt"))
    loaded = plugin_mod.load(path)
    question = "What is the tempo of this drum beat?"
    assert loaded.select(str(click_wav[0]), question) == ["asr", "tempo"]
    expected = router.select(featurizer([question], [str(click_wav[0])]))
    assert torch.equal(loaded.router.select(loaded.featurizer([question], [str(click_wav[0])])), expected)


def test_tampered_weights_are_refused(exported, tmp_path):
    copy = _copy(exported[0], tmp_path)
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (copy / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(plugin_mod.PluginError, match="model.safetensors does not match its digest"):
        plugin_mod.load(copy)


def test_tampered_manifest_is_refused(exported, tmp_path):
    copy = _copy(exported[0], tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["policy_config"]["hidden"] = 64
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(plugin_mod.PluginError, match="content hash does not match"):
        plugin_mod.load(copy)


def test_plugin_for_other_tool_versions_is_refused(exported, tmp_path):
    copy = _copy(exported[0], tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["tools"][3]["version"] = "librosa-0.9.0+deadbeef"
    manifest["content_hash"] = plugin_mod._content_hash(manifest)  # a consistent, but foreign, plugin
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(plugin_mod.PluginError, match="tool 'tempo': plugin expects librosa-beat-track librosa-0.9.0"):
        plugin_mod.load(copy)
    assert plugin_mod.load(copy, check_installed_tools=False).tools[3] == "tempo"


def test_cli_select_prints_json(exported, click_wav):
    out = subprocess.run([sys.executable, "-m", "autagent.cli", "select", "--plugin", str(exported[0]), "--audio",
                          str(click_wav[0]), "--question", "What is the tempo?"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert reply["tools"] == ["asr", "tempo"] and set(reply["probabilities"]) == {
        "asr", "emotion", "chords", "tempo", "pitch", "sound_events"}


def test_cli_refuses_a_non_plugin(tmp_path):
    out = subprocess.run([sys.executable, "-m", "autagent.cli", "select", "--plugin", str(tmp_path), "--audio", "x.wav",
                          "--question", "q"], capture_output=True, text=True)
    assert out.returncode == 2 and "not a plugin (no manifest.json)" in out.stderr

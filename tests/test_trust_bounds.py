"""What a plugin's manifest and a config file may make this process allocate (issue 62, the low items):
the router a manifest declares is checked against its weights before it is built, a manifest nested past
64 levels is a PluginError (never a RecursionError), and a config's YAML aliases cannot blow it up."""

from __future__ import annotations

import json
import time

import pytest
import torch

from autagent import api
from autagent.cli import main
from autagent.plugin.manifest import PluginTarget
from autagent.plugin.trust import PluginError, content_hash
from autagent.policies.router.export import RouterParts, export_router
from autagent.policies.router.features import Featurizer
from autagent.policies.router.model import Router, RouterConfig

TOOLS = ("asr", "emotion", "chords")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(), len(TOOLS))
    folder = tmp_path_factory.mktemp("p") / "plugin"
    return export_router(
        PluginTarget(folder, TOOLS, "embedded", {}, 30.0, {"name": "t"}, {"accuracy": 0.5}),
        RouterParts(router, featurizer),
    )


def _declaring(src, tmp_path, name, **policy_config):
    """A copy whose manifest declares other router sizes, re-hashed (an author's own plugin passes every hash)."""
    import shutil

    folder = tmp_path / name
    shutil.copytree(src, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["policy_config"].update(policy_config)
    manifest["content_hash"] = content_hash(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_a_manifest_declaring_a_router_its_weights_do_not_hold_is_refused_before_it_is_built(exported, tmp_path):
    """``"hidden": 40000`` beside 128-wide weights: once 1.35 GB allocated, then the load failed; now refused
    from the safetensors header, the router built on the meta device only."""
    api.load(exported)  # the genuine plugin loads
    wide = _declaring(exported, tmp_path, "wide", hidden=40000)
    start = time.perf_counter()
    with pytest.raises(
        PluginError, match=r"declares a router of \d+ values \(policy_config\), model.safetensors holds"
    ):
        api.load(wide)
    assert time.perf_counter() - start < 30
    many = _declaring(exported, tmp_path, "many", ensemble=100_000)
    with pytest.raises(PluginError, match="declares 100000 routers; model.safetensors holds"):
        api.load(many)


def _deep_plugin(folder, depth: int):
    folder.mkdir()
    text = '{"format": "autagent-plugin", "format_version": 2, "deep": ' + "[" * depth + "]" * depth + "}"
    (folder / "manifest.json").write_text(text)
    return folder


@pytest.mark.parametrize("depth", [65, 100_000])
def test_a_deeply_nested_manifest_is_a_plugin_error(tmp_path, capsys, depth):
    """100,000 brackets (200 KB, under the 16 MiB manifest cap) raised RecursionError from ``json.loads``;
    65 parsed and went on. Both are refused as the manifest, through ``autagent plugin verify`` too."""
    folder = _deep_plugin(tmp_path / "deep", depth)
    with pytest.raises(PluginError, match="manifest is nested deeper than 64 levels"):
        api.load(folder)
    assert main(["plugin", "verify", str(folder)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert "nested deeper than 64 levels" in report["checks"]["files_and_hash"]


def _bomb(levels: int) -> str:
    lines = ["policy:", "  lm:", "    extra_args:", "      a: &a [x, x, x, x, x, x, x, x, x]"]
    previous = "a"
    for name in "bcdefghij"[: levels - 1]:
        lines.append(f"      {name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join(lines) + "\n"


def test_a_config_whose_yaml_aliases_expand_past_the_bound_is_refused_naming_the_file(tmp_path, capsys):
    """Five levels of nine aliases (about 300 bytes) write out 59,049 values (seven levels: a 364-byte file
    became a 117 MB config.yaml, 2.3 GB resident, five minutes on the 2-core box); refused when the config
    loads, with one line naming the file.  A config that reuses a few values by alias still loads."""
    from autagent.config import ConfigError, load_config

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb(5))
    assert len(bomb.read_bytes()) < 400
    with pytest.raises(ConfigError, match=f"{bomb}: its YAML aliases"):
        load_config(bomb)
    assert main(["plugin", "verify", str(tmp_path / "no-plugin"), "--config", str(bomb)]) == 2
    err = capsys.readouterr().err
    assert f"autagent: error: {bomb}: its YAML aliases (*name) expand to more than 10000 values" in err
    assert err.count("\n") == 1
    reuse = tmp_path / "reuse.yaml"
    reuse.write_text("grpo: &g {steps: 3, batch_size: 8}\npolicy:\n  lm:\n    extra_args: {a: *g, b: *g}\n")
    assert load_config(reuse).policy.lm.extra_args == {"a": {"steps": 3, "batch_size": 8}} | {
        "b": {"steps": 3, "batch_size": 8}
    }

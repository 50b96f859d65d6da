"""A training run writes its plugin once (issue 64, item 1): the back-off is fitted, the plugin certified and
evaluated in memory, and the folder written with its card at the end; metrics.json records that one hash."""

from __future__ import annotations

import json
import pathlib

import yaml

from autagent.cli import main


def _hashes(value) -> list[str]:
    """Every ``content_hash`` anywhere in ``value``."""
    if isinstance(value, dict):
        return [h for k, v in value.items() for h in ([v] if k == "content_hash" else _hashes(v))]
    if isinstance(value, list):
        return [h for v in value for h in _hashes(v)]
    return []


def test_a_certified_run_with_a_backoff_writes_its_manifest_once_with_the_hash_metrics_records(
    tiny_bench, tmp_path, monkeypatch
):
    config = {
        "name": "once",
        "output_dir": str(tmp_path / "runs"),
        "answer_cache_dir": str(tmp_path / "answers"),
        "data": {"train": str(tiny_bench["paths"]["train"]), "test": str(tiny_bench["paths"]["test"])},
        "tools": {"executor": "local", "cache_dir": str(tiny_bench["cache"]), "enabled": list(tiny_bench["tools"])},
        "grpo": {"steps": 2, "batch_size": 8},
        "reward": {"tool_cost": 0.0},
        "policy": {
            "router": {
                "backoff": {"rule": "vote", "audio_dir": str(tmp_path / "stand-in-audio")},
                "objective": "expected",
                "table": {
                    "enabled": True,
                    "design": ["empty", "singles", "all"],
                    "budget": 300,
                    "held_out": 8,
                    "crossval": {"folds": 0},
                    "certify": {"enabled": True, "eps": 0.5},
                },
            }
        },
        "eval": {"methods": ["no_tool", "policy"], "plots": False, "cost_curve": False},
        "logging": {"wandb": False, "progress": False},
    }
    path = tmp_path / "once.yaml"
    path.write_text(yaml.safe_dump(config))
    written = []
    replace = pathlib.Path.replace

    def counted(self, target):  # every manifest is written to a temporary file, then replaced into place
        if pathlib.Path(target).name == "manifest.json":
            written.append(json.loads(pathlib.Path(self).read_text())["content_hash"])
        return replace(self, target)

    monkeypatch.setattr(pathlib.Path, "replace", counted)
    assert main(["train", "--config", str(path)]) == 0
    run_dir = tmp_path / "runs" / "once"
    manifest = json.loads((run_dir / "plugin" / "manifest.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert written == [manifest["content_hash"]]  # one write: weights, back-off, certificate and card together
    assert metrics["plugin"]["content_hash"] == manifest["content_hash"]
    assert set(_hashes(metrics)) == {manifest["content_hash"]}  # no stale hash of a plugin rewritten since
    assert "backoff.safetensors" in manifest["files"] and manifest["certificate"] == metrics["training"]["certificate"]
    card = (run_dir / "plugin" / "README.md").read_text()
    assert "## Certified operating point" in card and "| AuTAgent (trained policy) |" in card
    from autagent.api import load

    plugin = load(run_dir / "plugin", expected_sha256=manifest["content_hash"])
    assert plugin.backoff is not None
    assert (plugin.dial.describe() if plugin.dial else {}) == manifest["certificate"]["point"]
    policy = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    chosen = [tuple(r["tools"]) for r in policy if r["method"] == "policy"]
    assert chosen == [tuple(z) for z in plugin.select_many(tiny_bench["test"])]  # evaluated as it ships

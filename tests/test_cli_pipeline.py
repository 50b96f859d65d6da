"""The main job end to end through the CLI on a small benchmark: train, resume, eval, select, answer;
configs validated before any work; no silent synthetic data; every row of a broken benchmark counted."""

from __future__ import annotations

import glob
import json
import shutil
from pathlib import Path

import pytest
import yaml

from autagent.cli import main


@pytest.fixture()
def tiny_config(tiny_bench, tmp_path):
    config = {
        "name": "tiny",
        "output_dir": str(tmp_path / "runs"),
        "answer_cache_dir": str(tmp_path / "answers"),
        "data": {
            "train": str(tiny_bench["paths"]["train"]),
            "test": str(tiny_bench["paths"]["test"]),
            "dev_fraction": 0.2,
        },
        "tools": {"executor": "local", "cache_dir": str(tiny_bench["cache"]), "enabled": list(tiny_bench["tools"])},
        "grpo": {"steps": 4, "batch_size": 8},
        "policy": {"router": {"input_dropout": {"choices": 0.5}, "unfamiliar_fallback": {"choices": 0.01}}},
        "logging": {"wandb": False, "progress": False},
    }
    config["policy"]["router"]["learning_rate"] = 0.01
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, tmp_path / "runs" / "tiny"


def test_train_then_resume_then_eval_select_answer(tiny_config, tiny_bench, tmp_path, capsys, caplog):
    config, run_dir = tiny_config
    with caplog.at_level("INFO", logger="autagent"):
        assert main(["train", "--config", str(config)]) == 0
    assert "rows held out of train (data.dev_fraction 0.2, seed 0)" in caplog.text
    metrics = json.loads((run_dir / "metrics.json").read_text())
    expected = {
        "no_tool",
        "random",
        "all_tools",
        "tools_desc",
        "oracle_single",
        "oracle_subsets",
        "oracle_kind",
        "oracle_labels",
        "policy",
        *[f"single:{t}" for t in tiny_bench["tools"]],
    }
    assert set(metrics["methods"]) == expected and metrics["n"] == len(tiny_bench["test"])
    for method in metrics["methods"].values():
        assert {"accuracy", "official", "errors", "by_domain", "by_category", "avg_tools", "tool_calls", "n"} <= set(
            method
        )
    assert "selection" in metrics["methods"]["policy"] and "per_kind" in metrics["methods"]["policy"]["selection"]
    best = metrics["methods"]["oracle_subsets"]["accuracy"]
    assert all(m["accuracy"] <= best + 1e-9 for m in metrics["methods"].values())
    assert metrics["training"]["reasoner_calls"] < metrics["training"]["naive_reasoner_calls"]
    from safetensors.torch import load_file

    weights = load_file(run_dir / "plugin" / "model.safetensors")  # the familiarity bank and cut travel with it
    assert metrics["training"]["unfamiliar_cuts"]["choices"] == round(float(weights["familiar_choices_cut"]), 4)
    assert weights["familiar_choices_bank"].shape[0] > 1
    assert (
        metrics["plugin"]["content_hash"] == json.loads((run_dir / "plugin/manifest.json").read_text())["content_hash"]
    )
    card = (run_dir / "plugin" / "README.md").read_text()  # the model card gained the run's evaluation table
    policy = metrics["methods"]["policy"]  # under the report's names, with its interval
    low, high = policy["interval_95"]
    assert f"| AuTAgent (trained policy) | {100 * policy['accuracy']:.1f} | {100 * low:.1f}–{100 * high:.1f} |" in card
    assert "| policy |" not in card and "| no_tool |" not in card and "Small sample" in card
    for name in (
        "config.yaml",
        "report.md",
        "predictions.jsonl",
        "accuracy.png",
        "tool_calls.png",
        "training.png",
        "plugin/manifest.json",
        "plugin/model.safetensors",
    ):
        assert (run_dir / name).exists(), name
    report = (run_dir / "report.md").read_text()
    assert "| No-Tool |" in report
    # selection quality per question kind: the policy's precision / recall is the table's last column
    kind, quality = next(iter(metrics["methods"]["policy"]["selection"]["per_kind"].items()))
    rows = [line for line in report.splitlines() if line.startswith(f"| {kind} |") and " / " in line]
    shown = "–" if quality["precision"] is None else f"{100 * quality['precision']:.1f}"
    assert len(rows) == 1 and rows[0].split("|")[-2].strip().startswith(shown + " / ")

    # a second fresh start is refused; --resume continues to the new step count
    assert main(["train", "--config", str(config)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["train", "--config", str(config), "--resume", "--set", "grpo.steps=6"]) == 0
    steps = [json.loads(line)["step"] for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]

    out = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--config",
                str(config),
                "--dataset",
                str(tiny_bench["paths"]["test"]),
                "--plugin",
                str(run_dir / "plugin"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads((out / "metrics.json").read_text())["methods"]["policy"]["n"] == len(tiny_bench["test"])

    sample = tiny_bench["test"][0]
    capsys.readouterr()
    assert (
        main(
            [
                "answer",
                "--config",
                str(config),
                "--plugin",
                str(run_dir / "plugin"),
                "--audio",
                sample.audio,
                "--question",
                sample.question,
                "--choices",
                *sample.choices,
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    reply = json.loads(out)
    assert reply["answer"] in sample.choices and len(reply["records"]) == len(reply["tools"])
    assert "loading the plugin" in err and "asking it" in err  # what it waits for, said

    # select: one clip, then many in one load (a JSONL file, a folder), the same choice for each
    plugin = ["select", "--plugin", str(run_dir / "plugin")]
    singles = []
    for s in tiny_bench["test"][:3]:
        assert main([*plugin, "--audio", s.audio, "--question", s.question, "--choices", *s.choices]) == 0
        singles.append(json.loads(capsys.readouterr().out))
        assert [t for t, p in singles[-1]["probabilities"].items() if p > 0.5] == singles[-1]["tools"]
    batch = tmp_path / "batch.jsonl"
    rows = [{"audio": s.audio, "question": s.question, "choices": list(s.choices)} for s in tiny_bench["test"][:3]]
    batch.write_text("\n".join(json.dumps(r) for r in rows))
    assert main([*plugin, "--batch", str(batch)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["tools"] for line in lines] == [single["tools"] for single in singles]
    clips = tmp_path / "clips"
    clips.mkdir()
    for i, s in enumerate(tiny_bench["test"][:3]):
        shutil.copy(s.audio, clips / f"{i}.wav")
    (clips / "notes.txt").write_text("not a clip: left alone")
    assert main([*plugin, "--batch", str(clips), "--question", "What is the tempo?"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [Path(line["audio"]).name for line in lines] == ["0.wav", "1.wav", "2.wav"]


@pytest.mark.slow  # 28 s: three routers trained, resumed (make test-all); one router's stays in make test
def test_an_ensemble_trains_its_members_apart_resumes_each_and_selects_by_their_mean(tiny_config, tiny_bench):
    """``policy.router.ensemble: 2``: member 0 writes where a single router does, member 1 under
    members/1, each seeded apart (different weights); --resume continues both; the plugin holds both
    and selects the tools whose mean probability exceeds one half."""
    import torch
    from safetensors.torch import load_file

    from autagent.api import load
    from autagent.policies.router.ensemble import RouterEnsemble

    config, run_dir = tiny_config
    assert main(["train", "--config", str(config), "--set", "policy.router.ensemble=2"]) == 0
    assert (
        main(
            ["train", "--config", str(config), "--resume", "--set", "policy.router.ensemble=2", "--set", "grpo.steps=6"]
        )
        == 0
    )
    for log in (run_dir / "train_log.jsonl", run_dir / "members" / "1" / "train_log.jsonl"):
        assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2, 3, 4, 5, 6]
    weights = load_file(run_dir / "plugin" / "model.safetensors")
    first, second = (weights[f"members.{m}.net.3.weight"] for m in (0, 1))
    assert not torch.allclose(first, second)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["training"]["members"] == 2
    # the phase table: each router's steps, the reasoner's answers, each phase, in metrics.json and report.md
    timings = metrics["timings"]
    assert len(timings["routers"]) == 2 and all(s > 0 for s in timings["routers"])
    assert {"benchmark generation", "tool records", "training", "evaluation", "total"} <= set(timings["phases"])
    assert timings["reasoner"]["training_asked_s"] >= timings["reasoner"]["training_computed_s"] > 0
    report = (run_dir / "report.md").read_text()
    assert "## Where the time went" in report and f"| evaluation | {timings['phases']['evaluation']:.1f} |" in report
    plugin = load(run_dir / "plugin")
    assert isinstance(plugin.router, RouterEnsemble) and len(plugin.router.members) == 2
    features = plugin.featurizer.of_samples(tiny_bench["test"])
    each = torch.stack([member.tool_probabilities(features) for member in plugin.router.members])
    assert torch.allclose(plugin.router.tool_probabilities(features), each.mean(0))
    assert torch.equal(plugin.router.select(features), (each.mean(0) > 0.5).float())
    with pytest.raises(ValueError, match="ensemble must be an integer >= 1"):
        from autagent.policies.router.model import RouterConfig

        RouterConfig(ensemble=0)


@pytest.mark.slow
def test_a_router_run_fits_its_backoff_on_the_plugin_and_autagent_plugin_backoff_on_a_copy(
    tiny_config, tmp_path, capsys
):
    """``policy.router.backoff``: after training the plugin gains ``backoff.safetensors`` (familiarity
    banks from the run's own queries, the cut from the calibration phrasings) before the test split is
    evaluated; ``autagent plugin backoff`` fits one onto a copy and never overwrites a folder."""
    from autagent.api import load
    from autagent.policies.router.backoff import OFFSETS
    from autagent.policies.router.plugin import BACKOFF_FILE

    config, run_dir = tiny_config
    calibration = tmp_path / "calibration.jsonl"
    rows = [  # written for this test
        ("At what hour does the announcer say the shop opens?", ["seven", "nine"], "speech", ["asr"]),
        ("Is the tune climbing or falling at the end?", ["climbing", "falling"], "music", ["pitch"]),
        ("Is the speaker a man or a woman?", ["a man", "a woman"], "speech", []),
    ]
    calibration.write_text(
        "".join(
            json.dumps({"id": f"c{i}", "question": q, "choices": c, "domain": d, "tools": t}) + "\n"
            for i, (q, c, d, t) in enumerate(rows)
        )
    )
    audio = Path(__file__).resolve().parent.parent / ".cache" / "tests" / "stand-in-audio"  # made once
    settings = f"policy.router.backoff={{rule: fill, calibration: {calibration}, audio_dir: {audio}}}"
    assert main(["train", "--config", str(config), "--set", settings]) == 0
    fitted = json.loads((run_dir / "metrics.json").read_text())["training"]["backoff"]
    assert fitted["calibration_file"]["items"] == 3 and fitted["offset"] in OFFSETS
    assert set(fitted["cuts"]) == {"question", "choices"} and "curve" not in fitted
    manifest = json.loads((run_dir / "plugin" / "manifest.json").read_text())
    assert manifest["backoff"]["config"]["rule"] == "fill" and BACKOFF_FILE in manifest["files"]
    assert len(manifest["backoff"]["curve"]) == len(OFFSETS) and load(run_dir / "plugin").backoff is not None
    copy = tmp_path / "copy"
    command = ["plugin", "backoff", str(run_dir / "plugin"), "--out", str(copy), "--config", str(config)]
    capsys.readouterr()
    where = f"policy.router.backoff={{audio_dir: {audio}}}"
    assert main([*command, "--calibration", str(calibration), "--set", where]) == 0
    printed = json.loads(capsys.readouterr().out)["content_hash"]
    assert printed == json.loads((copy / "manifest.json").read_text())["content_hash"]
    assert main(command) == 2 and "already exists" in capsys.readouterr().err


def test_an_eval_over_broken_rows_and_clips_counts_every_row(tiny_config, tiny_bench, tmp_path):
    """Missing, empty and corrupt clips and unscorable rows: the eval finishes, every row is counted; the
    clips are checked as the file loads, so their rows are named unscorable and no tool runs on them."""
    config, _ = tiny_config
    rows = json.loads(tiny_bench["paths"]["test"].read_text())[:6]
    folder = tmp_path / "broken"
    (folder / "audio").mkdir(parents=True)
    for k, row in enumerate(rows):
        shutil.copy(tiny_bench["paths"]["test"].parent / row["audio_id"], folder / "audio" / f"{k}.wav")
        row["audio_id"] = f"audio/{k}.wav"
    (folder / "audio" / "0.wav").unlink()  # missing
    (folder / "audio" / "1.wav").write_bytes(b"")  # empty
    (folder / "audio" / "2.wav").write_bytes(b"RIFF0000WAVEjunk")  # corrupt
    rows[3]["choices"] = [rows[3]["choices"][0], ""]  # one usable choice: unscorable
    (folder / "test.json").write_text(json.dumps(rows))
    out = tmp_path / "out"
    assert (
        main(
            [
                "eval",
                "--config",
                str(config),
                "--dataset",
                str(folder / "test.json"),
                "--out",
                str(out),
                "--set",
                "eval.methods=[no_tool,all_tools,oracle_single]",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n"] == 6 and [u["row"] for u in metrics["unscorable"]] == [0, 1, 2, 3]
    reasons = [u["reason"] for u in metrics["unscorable"]]
    assert "file not found" in reasons[0] and "empty" in reasons[1] and "cannot decode" in reasons[2]
    no_tool = metrics["methods"]["no_tool"]
    assert no_tool["n"] == 6 and no_tool["errors"] == 4 and no_tool["official"]["n"] == 2
    assert not metrics["tool_errors"]  # no tool was run on a clip that cannot be read
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 6 * 3 and sum(1 for p in predictions if p.get("error")) >= 12


@pytest.mark.parametrize(
    "yaml_text, message",
    [
        ("grpo: {lr: 0.1}\n", "unknown field grpo.lr"),
        ("policy: {kind: transformer}\n", "policy.kind must be 'router' or 'lm'"),
        ("reward: {kind: shaped}\n", "reward.kind must be one of"),
        ("reasoner: {kind: gpt5}\n", "reasoner.kind must be one of"),
        ("eval: {methods: [no_tool, oracle]}\n", "unknown method 'oracle'"),
        ("grpo: {inner_epochs: 0}\n", "grpo.inner_epochs must be >= 1"),
        ("grpo: {steps: ten}\n", "field grpo.steps expects int"),
        ("policy: {lm: {learning_rte: 1.0e-6}}\n", "unknown field policy.lm.learning_rte"),
        ("tools: {enabled: [asr, whisper]}\n", "unregistered tools ['whisper']"),
        ("data: {dev_fraction: 1.5}\n", "data.dev_fraction must be in [0, 1)"),
        ("reward: {tool_cost: -0.05}\n", "reward.tool_cost must be a number in [0, 1)"),
    ],
)
def test_config_errors_name_file_and_field_before_any_work(tmp_path, capsys, yaml_text, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml_text)
    assert main(["train", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and message in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_a_config_naming_a_file_never_generates_the_benchmark(tmp_path, tiny_bench, capsys):
    bad = tmp_path / "only_test.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "data": {"test": str(tiny_bench["paths"]["test"]), "benchmark": {"root": str(tmp_path / "never")}},
                "output_dir": str(tmp_path / "runs"),
                "logging": {"wandb": False},
            }
        )
    )
    assert main(["train", "--config", str(bad)]) == 2
    assert "data.train is required" in capsys.readouterr().err and not (tmp_path / "never").exists()


def test_tools_run_prints_records(click_wav, tmp_path, capsys):
    assert (
        main(
            [
                "tools",
                "run",
                str(click_wav[0]),
                "--tools",
                "tempo,pitch",
                "--executor",
                "local",
                "--set",
                f"tools.cache_dir={tmp_path}",
            ]
        )
        == 0
    )
    records = json.loads(capsys.readouterr().out)
    assert [r["tool"] for r in records] == ["tempo", "pitch"] and abs(records[0]["output"]["bpm"] - 120) < 3


def test_every_experiment_config_loads():
    from autagent.config import load_config
    from autagent.recipes.sweep import read_sweep, variant_config

    paths = sorted(glob.glob("experiments/*.yaml"))
    assert len(paths) >= 9
    for path in paths:
        load_config(path)
    for path in sorted(glob.glob("experiments/sweeps/*.yaml")):
        spec = read_sweep(path)
        for name in spec["variants"]:  # as the sweep builds them, each variant's settings on a test set too
            _, own_tests = variant_config(spec, name, spec["seeds"][0])
            for test, settings in spec["also_test"].items():
                load_config(spec["base"], {**(spec.get("set") or {}), **settings, **(own_tests.get(test) or {})})
    certify = variant_config(read_sweep("experiments/sweeps/cascade_certify.yaml"), "adapted-3000", 0)[0]
    table = certify.policy.router.table
    assert (table.budget, table.held_out, table.certify.enabled, table.certify.eps) == (2000, 200, True, 0.09)
    paper = load_config("experiments/paper_qwen2audio.yaml")
    lm = paper.policy.lm
    assert (
        paper.grpo.steps,
        lm.learning_rate,
        paper.grpo.group_size,
        paper.grpo.temperature,
        lm.loss_type,
        lm.per_device_train_batch_size,
    ) == (200, 1e-6, 6, 1.0, "grpo", 8)
    assert paper.tools.tool_ids == ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")
    per_update = lm.per_device_train_batch_size * paper.launcher.num_processes * lm.gradient_accumulation_steps
    assert per_update % paper.grpo.group_size == 0  # TRL needs whole groups


def test_accelerate_relaunch_command(monkeypatch):
    from autagent.cli.commands import accelerate_command
    from autagent.config import load_config

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("ACCELERATE_LAUNCHED", raising=False)
    paper = load_config("experiments/paper_qwen2audio.yaml")
    command = accelerate_command(paper, ["train", "--config", "experiments/paper_qwen2audio.yaml"])
    assert command[1:3] == ["-m", "accelerate.commands.launch"]
    assert command[3:7] == ["--config_file", "experiments/accelerate/zero2.yaml", "--num_processes", "8"]
    assert command[7:] == ["-m", "autagent.cli", "train", "--config", "experiments/paper_qwen2audio.yaml"]
    assert accelerate_command(load_config("experiments/embedded_main.yaml"), ["train"]) is None
    monkeypatch.setenv("LOCAL_RANK", "0")  # already launched: run in place
    assert accelerate_command(paper, ["train"]) is None


@pytest.mark.slow
def test_sweep_runs_each_seed_in_its_own_process_and_matches_a_standalone_run(tiny_config, tmp_path):
    """A sweep's run equals ``autagent train`` on its resolved config, whatever ran before it."""
    import subprocess
    import sys

    config, _ = tiny_config
    sweep = tmp_path / "sweep.yaml"
    out = tmp_path / "sweep-runs"
    sweep.write_text(
        yaml.safe_dump(
            {
                "base": str(config),
                "seeds": [0, 1],
                "output_dir": str(out),
                "set": {"eval.methods": ["no_tool", "policy"]},
                "variants": {"differential": {"reward.kind": "differential"}, "binary": {"reward.kind": "binary"}},
                "compare": [["differential", "binary"]],
            }
        )
    )
    assert main(["sweep", str(sweep)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    first = json.loads((out / "differential-s0/metrics.json").read_text())["methods"]
    assert set(summary["variants"]) == {"differential", "binary"}
    assert summary["baselines"]["no_tool"]["accuracy"] == first["no_tool"]["accuracy"]  # the run's own baseline
    accuracies = [
        json.loads((out / f"binary-s{s}/metrics.json").read_text())["methods"]["policy"]["accuracy"] for s in (0, 1)
    ]
    assert summary["variants"]["binary"]["accuracy"]["values"] == accuracies
    shares = []  # recomputed from the runs' predictions, seed by seed
    for seed in (0, 1):
        picks = [
            {
                r["id"]: r["tools"]
                for r in map(json.loads, (out / f"{v}-s{seed}/predictions.jsonl").read_text().splitlines())
                if r["method"] == "policy"
            }
            for v in ("differential", "binary")
        ]
        shares.append(sum(picks[0][k] != picks[1][k] for k in picks[0]) / len(picks[0]))
    assert summary["compare"][0]["share_of_items_with_different_selection"]["values"] == shares

    alone = subprocess.run(
        [
            sys.executable,
            "-m",
            "autagent.cli",
            "train",
            "--config",
            str(out / "configs/binary-s1.yaml"),
            "--set",
            "name=alone",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert alone.returncode == 0, alone.stderr[-2000:]

    def policy_rows(run_dir):
        rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
        return [(r["id"], r["tools"], r["prediction"]) for r in rows if r["method"] == "policy"]

    assert policy_rows(out / "alone") == policy_rows(out / "binary-s1")
    assert main(["sweep", str(sweep)]) == 2  # finished runs are kept; without --resume it refuses to redo them
    assert main(["sweep", str(sweep), "--resume"]) == 0


def test_training_against_a_reasoner_server_that_is_down_stops_with_one_clear_line(tiny_config, capsys):
    """Nothing listens on the port: every call fails, and after ``reasoner.min_calls`` of them the run
    stops naming the server and the last failure, instead of training on answers that never came."""
    config, run_dir = tiny_config
    down = [
        "--set",
        "reasoner.kind=openai",
        "--set",
        "reasoner.openai.base_url=http://127.0.0.1:9/v1",
        "--set",
        "reasoner.openai.max_retries=0",
        "--set",
        "reasoner.openai.timeout_s=2",
        "--set",
        "reasoner.min_calls=5",
        "--set",
        "grpo.steps=2",
    ]
    assert main(["train", "--config", str(config), *down]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("autagent: error")]
    assert len(errors) == 1 and errors[0].startswith("autagent: error: reasoner http://127.0.0.1:9/v1 (model "), err
    assert "last failure: ConnectionError" in errors[0] and "Traceback" not in err
    assert not (run_dir / "plugin").exists()


def test_data_validate_checks_what_eval_needs_and_eval_names_the_rows_it_could_not_score(tiny_bench, tmp_path, capsys):
    """A 7-row MMAU file with a missing clip, a text file named .wav, a repeated id and repeated choices:
    validate rejects the first three rows (exit 1, or 0 with --allow-rejects) and keeps the one whose
    choices repeat a text, as published (issue 63), counts only the usable rows per domain; eval scores
    the file and names each row it could not score."""
    good = tiny_bench["test"][:3]
    rows = [s.to_mmau() for s in good]
    (tmp_path / "text.wav").write_text("not audio\n")
    rows.append({**rows[0], "id": "missing", "audio_id": str(tmp_path / "missing.wav"), "task": "rare"})
    rows.append({**rows[1], "id": "text", "audio_id": str(tmp_path / "text.wav"), "task": "rare"})
    rows.append({**rows[2], "task": "rare"})  # the id of row 2 again
    rows.append({**rows[0], "id": "twice", "choices": ["a", "b", "a "], "answer": "b", "task": "rare"})
    dataset = tmp_path / "mmau.json"
    dataset.write_text(json.dumps(rows))

    assert main(["data", "validate", str(dataset)]) == 1
    out, err = capsys.readouterr()
    report = json.loads(out)
    reasons = {r["row"]: r["reason"] for r in report["rejected"]}
    assert report["loaded"] == 4 and set(reasons) == {3, 4, 5}, reasons
    assert "file not found" in reasons[3] and "cannot decode audio" in reasons[4]
    assert "row 2's id" in reasons[5] and report["repeated_choices"] == 1
    assert report["by_domain"]["rare"] == 1 and sum(report["by_domain"].values()) == 4  # usable rows only
    assert "3 of 7 rows rejected" in err and "--allow-rejects" in err
    assert main(["data", "validate", str(dataset), "--allow-rejects"]) == 0
    capsys.readouterr()

    config = tmp_path / "eval.yaml"
    tools = {"executor": "local", "cache_dir": str(tiny_bench["cache"]), "enabled": list(tiny_bench["tools"])}
    config.write_text(
        yaml.safe_dump(
            {
                "name": "eval",
                "output_dir": str(tmp_path / "runs"),
                "answer_cache_dir": str(tmp_path / "answers"),
                "data": {"test": str(dataset)},
                "tools": tools,
                "eval": {"methods": ["no_tool", "all_tools"], "plots": False},
                "logging": {"wandb": False, "progress": False},
            }
        )
    )
    assert main(["eval", "--config", str(config), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "could not score 3 of 7 rows" in out
    assert f"row 3 (missing): field 'audio': {tmp_path / 'missing.wav'}: file not found" in out
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["methods"]["no_tool"]["n"] == 7 and metrics["methods"]["no_tool"]["official"]["n"] == 4


def test_a_resumed_sweep_evaluates_a_run_finished_before_the_keys_moved(tmp_path, monkeypatch):
    """A sweep run finished by an earlier version left its config in keys this version refuses (``table:``,
    ``grpo.credit``); ``--resume`` adding a test set writes the run's config again before ``autagent eval``
    reads it, instead of failing on the old one."""
    import subprocess

    import autagent.recipes.sweep as sweep
    from autagent.config import load_config

    config = load_config("experiments/embedded_main.yaml", {"output_dir": str(tmp_path), "name": "old-s0"})
    old = tmp_path / "configs" / "old-s0.yaml"
    old.parent.mkdir(parents=True)
    old.write_text("name: old-s0\ntable: {enabled: false}\ngrpo: {credit: tool}\n")
    read = []

    def evaluate(command, check):
        read.append(load_config(command[command.index("--config") + 1]))  # what autagent eval would load
        out = Path(command[command.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "metrics.json").write_text(json.dumps({"methods": {}}))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(sweep.subprocess, "run", evaluate)
    assert sweep.also_test_in_own_process(config, "draw7", {"data.benchmark.seed": 7}) == {"methods": {}}
    assert read[0].policy.router.credit == "tool" and read[0].name == "old-s0"


def test_a_resumed_sweep_continues_a_run_stopped_while_its_answer_table_filled(tmp_path, monkeypatch):
    """A sweep stopped while a run's answer table was being asked left the run's folder with its budget.json and
    no checkpoint; ``--resume`` passes ``--resume`` on to ``autagent train`` (which refuses that folder without
    it), and a folder that never started trains afresh."""
    import subprocess

    import autagent.recipes.sweep as sweep
    from autagent.config import load_config

    commands = []
    monkeypatch.setattr(
        sweep.subprocess,
        "run",
        lambda command, check: commands.append(command) or subprocess.CompletedProcess(command, 0),
    )
    stopped = load_config("experiments/embedded_main.yaml", {"output_dir": str(tmp_path), "name": "a-s0"})
    stopped.run_dir.mkdir(parents=True)
    (stopped.run_dir / "budget.json").write_text('{"spent": 1184, "limit": 3000}')
    fresh = load_config("experiments/embedded_main.yaml", {"output_dir": str(tmp_path), "name": "b-s0"})
    sweep.train_in_own_process(stopped, resume=True)
    sweep.train_in_own_process(fresh, resume=True)
    sweep.train_in_own_process(stopped, resume=False)
    assert ["--resume" in c for c in commands] == [True, False, False]


def test_a_sweep_compares_two_variants_selections_on_each_test_set(tmp_path):
    """The pair's share of items selected differently, per seed, on the sweep's own test split and on each extra
    test set, with the item counts: a test split cut to one row no longer stands for the comparison."""
    from autagent.recipes.sweep import compare_lines, different_selections

    def write(folder, picks):
        folder.mkdir(parents=True, exist_ok=True)
        rows = [{"id": i, "method": "policy", "tools": t, "correct": bool(t)} for i, t in picks.items()]
        rows.append({"id": "q0", "method": "all_tools", "tools": ["asr", "chords"]})  # another method: not counted
        (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    for seed, differ in ((0, 1), (1, 3)):
        write(tmp_path / f"a-s{seed}", {"q0": ["asr"]})
        write(tmp_path / f"b-s{seed}", {"q0": ["asr"]})
        write(tmp_path / f"a-s{seed}" / "also" / "draw7", {f"q{i}": ["asr"] for i in range(4)})
        write(tmp_path / f"b-s{seed}" / "also" / "draw7", {f"q{i}": ["asr"] if i >= differ else [] for i in range(4)})
    spec = {"seeds": [0, 1], "also_test": {"draw7": {}}}
    found = different_selections(tmp_path, "a", "b", spec)
    assert found["share_of_items_with_different_selection"]["values"] == [0.0, 0.0] and found["items"] == 1
    assert found["also/draw7/share_of_items_with_different_selection"]["values"] == [0.25, 0.75]
    assert found["also/draw7/items"] == 4
    table = compare_lines([{"pair": ["a", "b"], **found}])
    assert "on the test split | on draw7 |" in table[1]
    assert table[3] == "| a vs b | 0.0 ± 0.0 % of 1 | 50.0 ± 35.4 % of 4 |"
    # right where a tool was called: a is right on all four, b on 3 (seed 0) and 1 (seed 1), paired by item
    paired = found["also/draw7/paired"]
    assert [(e["seed"], e["difference"]) for e in paired] == [(0, 0.25), (1, 0.75)]
    assert paired[1]["interval_95"] == [-0.3114, 0.75]  # 3 of 3 discordant items for a: 4 items cannot tell
    assert table[-1].startswith("| a vs b | s0 +0.0 [+0.0, +0.0]; s1 +0.0 [+0.0, +0.0] | s0 +25.0 [")


def test_resume_of_a_run_that_never_started_is_refused_before_any_work(tiny_config, capsys):
    """``--resume`` where there is neither a checkpoint nor an answer table says so at once, before the tools
    run or the reasoner is asked (it once computed them all and then stopped on "no checkpoint")."""
    config, run_dir = tiny_config
    assert main(["train", "--config", str(config), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "holds no checkpoint and no answer table to continue" in err and "Traceback" not in err
    assert not (run_dir / "events.jsonl").exists() and not (run_dir / "checkpoints").exists()

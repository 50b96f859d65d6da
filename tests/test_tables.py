"""Result tables come from recorded runs: `autagent report record` writes a small JSON from a finished run
or sweep folder, `autagent report tables` rewrites the marked tables of the pages from those records, and
`--check` fails naming a table whose figures were edited by hand."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from autagent.cli import main
from autagent.evaluation.tables import write_tables
from autagent.recipes.sweep import _mean_std

ROOT = Path(__file__).resolve().parents[1]


def _run_folder(path: Path, policy: float = 0.6) -> Path:
    """A finished run's folder as `autagent train` leaves it, cut to what a record reads."""
    method = {"official": {"accuracy": 0.0}, "errors": 0, "by_category": {"animal": {"accuracy": 0.5, "n": 2}}}
    metrics = {
        "dataset": "test",
        "n": 10,
        "reasoner": "embedded:embedded",
        "tools": ["asr", "tempo"],
        "methods": {
            "no_tool": method | {"accuracy": 0.3, "avg_tools": 0.0, "by_domain": {"music": 0.2, "speech": 0.4}},
            "single:asr": method | {"accuracy": 0.4, "avg_tools": 1.0, "by_domain": {"music": 0.2, "speech": 0.6}},
            "single:tempo": method | {"accuracy": 0.5, "avg_tools": 1.0, "by_domain": {"music": 0.8, "speech": 0.2}},
            "policy": method | {"accuracy": policy, "avg_tools": 0.9, "by_domain": {"music": 0.8, "speech": 0.4}},
        },
    }
    path.mkdir(parents=True)
    (path / "metrics.json").write_text(json.dumps(metrics))
    (path / "config.yaml").write_text(yaml.safe_dump({"name": "tiny", "seed": 0}))
    return path


SPEC = {
    "main": {
        "domains": ["music", "speech"],
        "rows": [
            {"record": "tiny", "method": "no_tool"},
            {"record": "tiny", "method": "best_single", "label": "best single tool ({tool})"},
            {"record": "tiny", "method": "policy", "label": "AuTAgent, seed 0"},
            {"record": "seeds", "variant": "router", "label": "AuTAgent, seeds 0-2", "seeds": True},
        ],
    }
}


def _checkout(tmp_path: Path, monkeypatch) -> Path:
    """A checkout with a recorded run, a recorded sweep, the spec, and a README whose table is stale."""
    monkeypatch.chdir(tmp_path)
    assert main(["report", "record", str(_run_folder(tmp_path / "runs" / "tiny")), "--as", "tiny"]) == 0
    sweep = tmp_path / "runs" / "sweeps" / "seeds"
    sweep.mkdir(parents=True)
    summary = {
        "sweep": "experiments/sweeps/seeds.yaml",
        "seeds": [0, 1, 2],
        "variants": {
            "router": {
                "accuracy": _mean_std([0.6, 0.7, 0.65]),
                "avg_tools": _mean_std([0.9, 1.1, 1.0]),
                "also/draw7/accuracy": _mean_std([0.5, 0.55, 0.6]),
                "also/draw7/avg_tools": _mean_std([1.0, 1.0, 1.2]),
            }
        },
        "baselines": {"no_tool": {"accuracy": 0.3, "avg_tools": 0.0}},
        "also_baselines": {"draw7": {"no_tool": {"accuracy": 0.25, "avg_tools": 0.0}}},
    }
    (sweep / "summary.json").write_text(json.dumps(summary))
    assert main(["report", "record", str(sweep), "--as", "seeds", "--commit", "abc1234"]) == 0
    (tmp_path / "docs" / "results" / "tables.yaml").write_text(yaml.safe_dump(SPEC))
    (tmp_path / "README.md").write_text("# Tiny\n\n<!-- table: main -->\n| stale |\n<!-- /table -->\n\nThe end.\n")
    return tmp_path


def test_record_keeps_what_tables_need_of_a_tiny_run_folder(tmp_path, monkeypatch, capsys):
    run = _run_folder(tmp_path / "runs" / "tiny")
    monkeypatch.chdir(tmp_path)
    assert main(["report", "record", str(run), "--as", "tiny", "--commit", "abc1234", "--about", "a tiny run"]) == 0
    made = json.loads((tmp_path / "docs" / "results" / "records" / "tiny.json").read_text())
    assert made["kind"] == "run" and made["commit"] == "abc1234" and made["about"] == "a tiny run"
    assert made["transcription"] is False and made["n"] == 10 and made["tools"] == ["asr", "tempo"]
    assert made["methods"]["policy"] == {
        "label": "AuTAgent (trained policy)",
        "accuracy": 0.6,
        "avg_tools": 0.9,
        "by_domain": {"music": 0.8, "speech": 0.4},
    }
    assert made["methods"]["single:asr"]["label"] == "T1 asr"
    assert "by_category" not in json.dumps(made)  # small: what a table shows, nothing more
    assert main(["report", "record", str(tmp_path), "--as", "nothing"]) == 2
    assert "neither a run folder (metrics.json) nor a sweep's (summary.json)" in capsys.readouterr().err


def test_a_table_is_rewritten_from_the_recorded_json(tmp_path, monkeypatch):
    root = _checkout(tmp_path, monkeypatch)
    assert main(["report", "tables"]) == 0
    text = (root / "README.md").read_text()
    assert "| stale |" not in text and text.startswith("# Tiny\n") and text.endswith("<!-- /table -->\n\nThe end.\n")
    rows = text.split("<!-- table: main -->\n")[1].splitlines()
    assert rows[0] == "| Method | Music | Speech | Avg | Avg tools |"
    assert rows[2] == "| No-Tool | 20.0 | 40.0 | **30.0** | 0.00 |"
    assert rows[3] == "| best single tool (T4 tempo) | 80.0 | 20.0 | **50.0** | 1.00 |"  # the best, not the first
    assert rows[4] == "| AuTAgent, seed 0 | 80.0 | 40.0 | **60.0** | 0.90 |"
    # mean ± the sample std over seeds, the sweeps' own (0.65 ± 0.05), and each seed
    assert rows[5] == "| AuTAgent, seeds 0-2 |  |  | **65.0 ± 5.0 (60.0, 70.0, 65.0)** | 1.00 ± 0.10 |"
    assert "docs/results/records/tiny.json" in rows[7] and "docs/results/records/seeds.json" in rows[7]
    assert "abc1234" in rows[7]
    assert write_tables(root, check=True) == []


def test_check_fails_on_a_hand_edited_figure_and_names_the_table(tmp_path, monkeypatch, capsys):
    root = _checkout(tmp_path, monkeypatch)
    assert main(["report", "tables"]) == 0
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("**60.0**", "**61.0**"))
    capsys.readouterr()
    assert main(["report", "tables", "--check"]) == 1
    assert "README.md: table main differs from its records" in capsys.readouterr().err
    assert "**61.0**" in readme.read_text()  # --check rewrites nothing
    # a record changed without its tables is caught the same way
    assert main(["report", "tables"]) == 0
    _run_folder(tmp_path / "runs" / "other", policy=0.7)
    assert main(["report", "record", str(tmp_path / "runs" / "other"), "--as", "tiny"]) == 0
    assert main(["report", "tables", "--check"]) == 1
    # a page naming a table the spec does not know is an error naming both
    (root / "docs" / "page.md").write_text("<!-- table: nope -->\n<!-- /table -->\n")
    assert main(["report", "tables", "--check"]) == 2
    assert "docs/page.md: table 'nope' is not in docs/results/tables.yaml" in capsys.readouterr().err


def test_check_fails_when_a_tables_markers_are_gone_or_stand_alone(tmp_path, monkeypatch, capsys):
    """Deleting a table's markers (to edit its figures by hand) fails --check; so does one marker alone,
    and a table missing from the page its spec names (fails without tables.write_tables' spec pass)."""
    root = _checkout(tmp_path, monkeypatch)
    assert main(["report", "tables"]) == 0
    readme = root / "README.md"
    rewritten = readme.read_text()
    readme.write_text(
        rewritten.replace("<!-- table: main -->\n", "").replace("<!-- /table -->", "").replace("60.0", "99.0")
    )
    capsys.readouterr()
    assert main(["report", "tables", "--check"]) == 2
    assert "table main of docs/results/tables.yaml is missing" in capsys.readouterr().err
    readme.write_text(rewritten.replace("<!-- /table -->", ""))  # the opening marker alone
    assert main(["report", "tables", "--check"]) == 2
    assert "'<!-- table: main -->' has no matching marker" in capsys.readouterr().err
    readme.write_text(rewritten)
    spec = yaml.safe_load((root / "docs" / "results" / "tables.yaml").read_text())
    spec["main"]["page"] = "docs/other.md"  # the table stands, but not on the page the spec names
    (root / "docs" / "results" / "tables.yaml").write_text(yaml.safe_dump(spec))
    assert main(["report", "tables", "--check"]) == 2
    assert "docs/other.md: table main" in capsys.readouterr().err
    spec["main"]["page"] = "README.md"
    (root / "docs" / "results" / "tables.yaml").write_text(yaml.safe_dump(spec))
    assert main(["report", "tables", "--check"]) == 0


def test_the_projects_tables_are_what_their_records_give():
    assert write_tables(ROOT, check=True) == []


def test_a_sweeps_extra_test_set_is_recorded_apart(tmp_path, monkeypatch, capsys):
    """``--test draw7``: the variants' figures and the baselines of the sweep's ``also_test`` set."""
    _checkout(tmp_path, monkeypatch)
    sweep = tmp_path / "runs" / "sweeps" / "seeds"
    assert main(["report", "record", str(sweep), "--as", "seeds_draw7", "--test", "draw7"]) == 0
    made = json.loads((tmp_path / "docs" / "results" / "records" / "seeds_draw7.json").read_text())
    assert made["variants"]["router"]["accuracy"] == {"values": [0.5, 0.55, 0.6]}
    assert made["baselines"]["no_tool"]["accuracy"] == 0.25
    assert main(["report", "record", str(sweep), "--as", "nothing", "--test", "draw8"]) == 2
    assert "no test set 'draw8'" in capsys.readouterr().err


def test_a_table_names_its_columns_and_joins_two_test_sets_in_one_cell(tmp_path, monkeypatch):
    from autagent.evaluation.tables import load_records, render

    _checkout(tmp_path, monkeypatch)
    assert main(["report", "record", str(tmp_path / "runs" / "sweeps" / "seeds"), "--as", "d7", "--test", "draw7"]) == 0
    spec = {
        "avg": "Avg (test · draw 7)",
        "tools": "Tools",
        "rows": [
            {
                "label": "router",
                "items": [{"record": "seeds", "variant": "router"}, {"record": "d7", "variant": "router"}],
            }
        ],
    }
    lines = render("two", spec, load_records(tmp_path)).splitlines()
    assert lines[0] == "| Method | Avg (test · draw 7) | Tools |"
    assert lines[2] == "| router | **65.0 ± 5.0** · **55.0 ± 5.0** | 1.00 ± 0.10 · 1.07 ± 0.12 |"


def test_a_sweep_records_what_prose_quotes_per_domain_and_from_cross_validation(tmp_path, monkeypatch):
    """Per-domain accuracies and cross-validation's held-out reward go from the runs through the sweep's
    summary into the record (fails without sweep.quoted_figures and record_sweep keeping them)."""
    from autagent.recipes.sweep import quoted_figures

    def run(music, draw7_music, reward, digest):
        policy = {"accuracy": 0.5, "avg_tools": 1.0, "by_domain": {"music": music, "sound": 0.5}}
        found = {
            "chosen": {"reward.tool_cost": 0.0},
            "candidates": [
                {"candidate": {"reward.tool_cost": 0.05}, "reward": reward + 0.1},  # the best is not always chosen
                {"candidate": {"reward.tool_cost": 0.0}, "reward": reward},
            ],
        }
        also = {"draw7": {"policy": policy | {"by_domain": {"music": draw7_music}}}}
        return {
            "methods": {"policy": policy},
            "training": {"crossval": found},
            "also_test": also,
            "data_digest": digest,
        }

    by_seed = {0: run(0.4, 0.5, 0.235, "abc"), 1: run(0.6, 0.7, 0.278, "abc")}
    figures = quoted_figures(by_seed, ["draw7"])
    assert figures["by_domain/music"]["values"] == [0.4, 0.6]
    assert figures["also/draw7/by_domain/music"]["values"] == [0.5, 0.7]
    assert "also/draw7/by_domain/sound" not in figures
    assert figures["crossval/held_out_reward"]["values"] == [0.235, 0.278]  # the chosen candidate's
    assert figures["crossval/chosen"] == [{"reward.tool_cost": 0.0}] * 2 and figures["data_digest"] == ["abc"]
    _checkout(tmp_path, monkeypatch)
    sweep = tmp_path / "runs" / "sweeps" / "seeds"
    summary = json.loads((sweep / "summary.json").read_text())
    summary["variants"]["router"] |= figures
    (sweep / "summary.json").write_text(json.dumps(summary))
    assert main(["report", "record", str(sweep), "--as", "quoted"]) == 0
    made = json.loads((tmp_path / "docs" / "results" / "records" / "quoted.json").read_text())["variants"]["router"]
    assert made["by_domain"] == {"music": {"values": [0.4, 0.6]}, "sound": {"values": [0.5, 0.5]}}
    assert made["crossval_held_out_reward"] == {"values": [0.235, 0.278]}
    assert main(["report", "record", str(sweep), "--as", "quoted7", "--test", "draw7"]) == 0
    made = json.loads((tmp_path / "docs" / "results" / "records" / "quoted7.json").read_text())["variants"]["router"]
    assert made["by_domain"] == {"music": {"values": [0.5, 0.7]}}

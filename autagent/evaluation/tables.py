"""Result tables written from the runs that made them (``autagent report record`` and ``report tables``).

A **record** is a small JSON in ``docs/results/records/``, what a table needs of a finished run or sweep and
nothing more: per method of a run's ``metrics.json`` its accuracy, accuracy per domain and tools per
query; per variant of a sweep's ``summary.json`` each seed's accuracy and tools. It says where it came
from (``source``, ``commit``, ``finished``). A record written by hand from figures a page gives is a
*transcription* and says so (``"transcription": true`` and the page and commit in ``source``).

A **table** is a block of a Markdown page between ``<!-- table: NAME -->`` and ``<!-- /table -->``;
``docs/results/tables.yaml`` says which rows it holds (a run's method or a sweep's variant of a record,
its label, whether the seeds are listed). ``autagent report tables`` rewrites every block in
``README.md`` and ``docs/**/*.md`` from the records; ``--check`` (``make lint``) rewrites nothing and
fails naming each block that differs, so a figure edited by hand, or a record changed without its
tables, is caught.  Every table of the spec must stand on its page (``page:``, else on some page)
between both markers, and no marker may stand alone: deleting a table's markers to edit its figures
freely is an error too (a table the spec no longer wants leaves the spec as well).  Means ± spread are
computed here from the seeds' values with the sweeps' own spread (the sample standard deviation,
``statistics.stdev``, as ``autagent/recipes/sweep.py``), never by hand.
"""

from __future__ import annotations

import datetime
import json
import re
import statistics
import subprocess
from pathlib import Path

import yaml

from .report import label

RESULTS = Path("docs/results")
RECORDS = RESULTS / "records"
SPEC = RESULTS / "tables.yaml"
PAGES = ("README.md", "docs/**/*.md")
BLOCK = re.compile(r"(<!-- table: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)
MARKER = re.compile(r"(?<!`)<!-- (?:table: [\w.-]+|/table) -->(?!`)")  # one in `code` is prose about markers
RUN_FIELDS = ("accuracy", "avg_tools", "by_domain")


class TableError(Exception):
    """A record, a table's spec or a page that cannot be read as one: the message names the file."""


# ---- records ------------------------------------------------------------------------------------------
def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as err:
        raise TableError(f"{path}: not found") from err
    except json.JSONDecodeError as err:
        raise TableError(f"{path}: not JSON ({err.msg}, line {err.lineno})") from err


def _commit(folder: Path) -> str | None:
    """HEAD of the checkout holding ``folder`` (a run is written inside the checkout that trained it)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def record_run(run_dir: Path) -> dict:
    """What the tables need of a finished run: each method's label, accuracy, per-domain accuracy, tools."""
    metrics = _read_json(run_dir / "metrics.json")
    config = yaml.safe_load((run_dir / "config.yaml").read_text()) if (run_dir / "config.yaml").exists() else {}
    methods = {}
    for name, m in metrics.get("methods", {}).items():
        methods[name] = {"label": label(name)} | {k: m[k] for k in RUN_FIELDS if k in m}
    if not methods:
        raise TableError(f"{run_dir / 'metrics.json'}: no methods (is it a finished run's?)")
    return {
        "kind": "run",
        "source": f"{config.get('name', run_dir.name)}, seed {config.get('seed', '?')}: {run_dir}/metrics.json",
        "dataset": metrics.get("dataset"),
        "n": metrics.get("n"),
        "reasoner": metrics.get("reasoner"),
        "tools": metrics.get("tools", []),
        "plugin_content_hash": (metrics.get("plugin") or {}).get("content_hash"),
        "methods": methods,
    }


def curve_entries(name: str, curve: dict | None) -> dict:
    """A variant's accuracy-against-tools curve (a sweep summary's ``cost_curve``) as entries tables can name:
    ``<name>@K=k`` (the plugin's K most probable tools), ``<name>@fixed@K=k`` (the fixed order), and
    ``<name>@gap@K=k`` (plugin − fixed, paired by seed), each seed's value and K as its tools."""
    out = {}
    for part, points in (
        ("", (curve or {}).get("plugin")),
        ("@fixed", (curve or {}).get("fixed_order")),
        ("@gap", (curve or {}).get("gap")),
    ):
        for k, point in enumerate(points or []):
            key = f"{name}{part}@K={k}"
            out[key] = {"label": key, "accuracy": {"values": point["values"]}, "avg_tools": k}
    if curve and curve.get("threshold"):
        point = curve["threshold"]
        out[f"{name}@threshold"] = {
            "label": f"{name}@threshold",
            "accuracy": {"values": point["accuracy"]["values"]},
            "avg_tools": {"values": point["avg_tools"]["values"]},
        }
    return out


def record_sweep(sweep_dir: Path, test: str | None = None) -> dict:
    """What the tables need of a finished sweep: each variant's accuracy and tools per seed, the baselines;
    with ``test``, those of the sweep's extra test set of that name (``also_test``)."""
    summary = _read_json(sweep_dir / "summary.json")
    prefix = f"also/{test}/" if test else ""
    variants = {}
    for name, v in summary.get("variants", {}).items():
        variants[name] = {"label": name} | {
            key: {"values": v[prefix + key]["values"]} for key in ("accuracy", "avg_tools") if prefix + key in v
        }
        domains = {k[len(prefix + "by_domain/") :]: s for k, s in v.items() if k.startswith(prefix + "by_domain/")}
        if domains:  # what prose quotes per domain, and cross-validation's held-out reward, from the record
            variants[name]["by_domain"] = {d: {"values": s["values"]} for d, s in domains.items()}
        if "crossval/held_out_reward" in v:
            variants[name]["crossval_held_out_reward"] = {"values": v["crossval/held_out_reward"]["values"]}
        for key in ("vs_all_tools", "tool_seconds"):  # paired to All-Tools per seed; tool-seconds per answer
            if prefix + key in v:
                variants[name][key] = v[prefix + key]
        if "certificates" in v:
            variants[name]["certificates"] = v["certificates"]
        variants.update(curve_entries(name, v.get(prefix + "cost_curve")))
    if test and not any(len(v) > 1 for v in variants.values()):
        raise TableError(f"{sweep_dir / 'summary.json'}: no test set {test!r} (the sweep's also_test)")
    if not variants:
        raise TableError(f"{sweep_dir / 'summary.json'}: no variants (is it a finished sweep's?)")

    found = (summary.get("also_baselines") or {}).get(test, {}) if test else summary.get("baselines", {})
    baselines = {k: {"label": label(k)} | b for k, b in found.items()}
    compare = [
        {"pair": c["pair"], "paired": c[prefix + "paired"]}
        for c in summary.get("compare", [])
        if prefix + "paired" in c
    ]
    return {
        "kind": "sweep",
        "source": f"autagent sweep {summary.get('sweep', '?')}: {sweep_dir}/summary.json",
        "seeds": summary.get("seeds"),
        "variants": variants,
        "baselines": baselines,
        **({"compare": compare} if compare else {}),
    }


def record(
    folder: str | Path, name: str, commit: str | None = None, about: str | None = None, test: str | None = None
) -> Path:
    """Write ``docs/results/records/<name>.json`` from a run folder (``metrics.json``) or a sweep's
    (``summary.json``)."""
    folder = Path(folder)
    if (folder / "metrics.json").exists():
        made, done = record_run(folder), folder / "metrics.json"
    elif (folder / "summary.json").exists():
        made, done = record_sweep(folder, test), folder / "summary.json"
    else:
        raise TableError(f"{folder}: neither a run folder (metrics.json) nor a sweep's (summary.json)")
    if not re.fullmatch(r"[\w.-]+", name):
        raise TableError(f"--as {name!r}: a record's name is letters, digits, '_', '-' or '.'")
    finished = datetime.datetime.fromtimestamp(done.stat().st_mtime, datetime.timezone.utc)
    made = {
        "about": about or made["source"].split(":")[0],
        "commit": commit or _commit(folder),
        "finished": finished.strftime("%Y-%m-%d"),
        "transcription": False,
    } | made
    out = RECORDS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(made, indent=1, ensure_ascii=False) + "\n")
    return out


# ---- tables -------------------------------------------------------------------------------------------
def spread(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation, as a sweep's summary computes them (0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _figure(stat, scale: float, digits: int, show_std: bool = True, seeds: bool = False) -> str:
    """One figure: a number (a run's), or ``{"values": [...]}`` (seeds: mean ± std computed here), or
    ``{"mean", "std"}`` (a transcribed aggregate whose seeds no page gives)."""
    if stat is None:
        return ""
    if isinstance(stat, (int, float)):
        return f"{scale * stat:.{digits}f}"
    if "values" in stat:
        mean, std = spread(stat["values"])
    else:
        mean, std = stat["mean"], stat.get("std")
    text = f"{scale * mean:.{digits}f}"
    if show_std and std is not None:
        text += f" ± {scale * std:.{digits}f}"
    if seeds and "values" in stat:
        text += " (" + ", ".join(f"{scale * v:.{digits}f}" for v in stat["values"]) + ")"
    return text


def _entry(records: dict, row: dict, table: str) -> tuple[dict, dict]:
    """The record and its method (run) or variant (sweep) a row of ``table`` names."""
    name = row.get("record")
    if name not in records:
        raise TableError(f"{SPEC}: table {table}: record {name!r} not found in {RECORDS}/")
    rec = records[name]
    entries = rec.get("methods", {}) | rec.get("baselines", {}) | rec.get("variants", {})
    key = row.get("method") or row.get("variant")
    if key == "best_single":  # the run's best single tool, whichever it is
        key = max((k for k in entries if k.startswith("single:")), key=lambda k: entries[k]["accuracy"], default=key)
    if key not in entries:
        raise TableError(f"{SPEC}: table {table}: {name}.json has no method or variant {key!r}")
    return rec, entries[key]


def render(table: str, spec: dict, records: dict) -> str:
    """The Markdown of ``table``: header, a row per spec row, and a line naming the records it came from."""
    domains = spec.get("domains", [])
    head = [
        spec.get("first", "Method"),
        *[d.capitalize() for d in domains],
        spec.get("avg", "Avg"),
        spec.get("tools", "Avg tools"),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    used: dict[str, dict] = {}
    rows = []
    for row in spec["rows"]:  # method "*": every method of the record, in its order
        every = row.get("method") == "*" and records.get(row.get("record"), {}).get("methods", {})
        rows += [row | {"method": m} for m in every] if every else [row]
    for row in rows:
        items = row.get("items") or [row]  # several entries in one row, joined by " · "
        cells: list[list[str]] = [[] for _ in range(len(domains) + 2)]
        labels = []
        for item in items:
            rec, entry = _entry(records, item, table)
            used[item["record"]] = rec
            labels.append(item.get("label", entry["label"]))
            show_std = item.get("std", True)
            for k, d in enumerate(domains):
                cells[k].append(_figure(entry.get("by_domain", {}).get(d), 100, 1, show_std))
            avg = _figure(entry.get("accuracy"), 100, 1, show_std, item.get("seeds", False))
            cells[-2].append(f"**{avg}**" if item.get("bold", spec.get("bold", True)) else avg)
            cells[-1].append(_figure(entry.get("avg_tools"), 1, 2, show_std))
        label = row.get("label", " · ".join(labels))
        label = label.replace("{tool}", entry["label"])  # best_single's label names the tool it found
        lines.append("| " + " | ".join([label, *(" · ".join(c) for c in cells)]) + " |")
    commits = spec.get("commits", True)  # false on the front page: the record names its commit
    sources = "; ".join(
        f"{RECORDS}/{name}.json ({rec.get('about', '')}"
        + (f"; at {rec.get('commit') or 'an unknown commit'}" if commits else "")
        + ("; a transcription" if rec.get("transcription") else "")
        + ")"
        for name, rec in used.items()
    )
    lines += ["", f"<sub>`autagent report tables` from {sources}.</sub> "]  # the end marker follows on this line
    return "\n".join(lines)


def load_records(root: Path) -> dict:
    return {p.stem: _read_json(p) for p in sorted((root / RECORDS).glob("*.json"))}


def load_spec(root: Path) -> dict:
    path = root / SPEC
    try:
        spec = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError as err:
        raise TableError(f"{path}: not found") from err
    for name, table in spec.items():
        if not isinstance(table, dict) or not isinstance(table.get("rows"), list):
            raise TableError(f"{path}: table {name}: needs a list of rows")
    return spec


def pages(root: Path) -> list[Path]:
    return sorted({p for pattern in PAGES for p in root.glob(pattern)})


def write_tables(root: str | Path = ".", check: bool = False) -> list[str]:
    """Rewrite every table block of the pages from the records (or, with ``check``, only compare);
    returns ``"<page>: table <name>"`` for each block that differed.  A table of the spec missing from
    its page, or a marker without its pair, is a :class:`TableError`."""
    root = Path(root)
    spec, records = load_spec(root), load_records(root)
    differ, found = [], {}
    for page in pages(root):
        text = page.read_text()
        where = page.relative_to(root).as_posix()

        def fill(match: re.Match, page=page, where=where) -> str:
            name = match["name"]
            if name not in spec:
                raise TableError(f"{where}: table {name!r} is not in {SPEC}")
            found.setdefault(name, set()).add(where)
            body = render(name, spec[name], records)
            if body != match["body"]:
                differ.append(f"{where}: table {name}")
            return match[1] + body + match[4]

        new = BLOCK.sub(fill, text)
        stray = MARKER.findall(BLOCK.sub("", text))
        if stray:
            raise TableError(
                f"{where}: {stray[0]!r} has no matching marker (a table is <!-- table: NAME --> ... <!-- /table -->)"
            )
        if new != text and not check:
            page.write_text(new)
    for name, table in spec.items():
        page = table.get("page")
        if page not in found.get(name, set()) if page else name not in found:
            raise TableError(
                f"{page or 'no page'}: table {name} of {SPEC} is missing (its <!-- table: {name} --> ... "
                "<!-- /table --> markers are gone): put them back and run `autagent report tables`"
            )
    return differ

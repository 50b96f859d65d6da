"""The README's map and the docs' cross-references point at things that exist: every repository path the
README names, every `make` target and `autagent` command, every relative link (file and #anchor) of the
README and docs/, and every section a file cites by name (``docs/results/cascade.md, "What the budget
costs"``). Reads files only: fast."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest

from autagent.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Names the README gives of files a run or a plugin writes, or a user writes (a request's body), not of files
# in the repository.
RUN_OUTPUTS = {"manifest.json", "metrics.json", "report.md", "request.json"}
# Sections cited by name that another branch was writing when this test was: remove each once it lands.
PENDING: set[str] = set()


def code_spans(text: str, fenced: bool = True) -> list[str]:
    """Inline code (and fenced blocks) of a Markdown page: where paths and commands are written."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M) if fenced else []
    return blocks + re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))


def test_every_path_the_readme_names_exists():
    """The map and the prose (inline code; the fenced examples name a user's files and models)."""
    named = set()
    for span in code_spans(README, fenced=False):
        for word in span.split():
            word = word.strip("(),;'\"")
            if word.startswith(("http", "/", "<", "runs/", ".cache/", "data/")) or re.search(r"[=:(@]", word):
                continue  # URLs, routes, placeholders, code, and what a run writes
            if "/" in word or re.search(r"\.(py|md|ya?ml|json|jsonl|toml)$", word):
                named.add(word)
    missing = []
    for path in sorted(named):
        if "/" not in path and path in RUN_OUTPUTS:
            continue
        if not (list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
            missing.append(path)
    assert not missing, f"README.md names paths that do not exist: {missing}"
    assert "autagent/cli/" in named and "experiments/embedded_main.yaml" in named  # the scan reads the map


def test_every_make_target_the_readme_names_exists():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    named = {t for span in code_spans(README) for t in re.findall(r"(?<![\w/.-])make ([a-z][\w-]*)", span)}
    assert {"setup", "train", "test", "lint", "bench"} <= named
    assert named <= targets, f"README.md names make targets the Makefile lacks: {sorted(named - targets)}"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_autagent_command_the_readme_names_exists():
    commands = _subcommands(build_parser())
    named, unknown = set(), []
    for span in code_spans(README):
        for first, second in re.findall(r"(?<!from )(?<!import )\bautagent ([a-z][\w-]*)(?: ([a-z][\w|-]*))?", span):
            named.add(first)
            if first not in commands:
                unknown.append(first)
                continue
            inner = _subcommands(commands[first])
            for verb in second.split("|") if inner and second else []:
                if verb not in inner:
                    unknown.append(f"{first} {verb}")
    assert {"serve", "mcp", "sweep", "report"} <= named
    assert not unknown, f"README.md names autagent commands that do not exist: {unknown}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        base = slug(heading)
        out.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_and_anchor_that_exist(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links to nothing: {broken}"


def _sections(page: Path) -> list[str]:
    """What a page's sections are cited by: its headings and its bold paragraph leads (**Tool cost** ...)."""
    text = page.read_text()
    leads = re.findall(r"^#+ (.+)$", text, re.M) + re.findall(r"^\*\*(.+?)\*\*", text, re.M)
    return [lead.replace("`", "") for lead in leads]


def _source_files() -> list[Path]:
    """The checkout's files less what runs make (hidden folders: .venv, .venv-vllm, .cache; runs/, data/):
    walking those took 50 s of make test in a checkout that had trained and set up vLLM."""
    found = []
    for folder, subfolders, names in os.walk(ROOT):
        made = {"runs", "data"} if Path(folder) == ROOT else set()  # autagent/data/ is code
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in made | {"__pycache__"}]
        found += [Path(folder) / name for name in names]
    return found


def test_every_section_cited_by_name_exists():
    """``docs/results/transfer.md, "Unfamiliar choices"``, in code, configs and docs: the page has a heading
    or a bold lead starting with that name (wrapped lines and comment marks joined first)."""
    files = [p for p in _source_files() if p.suffix in {".py", ".yaml", ".md"}]
    cite = re.compile(r"((?:docs/)?(?:results/)?[\w-]+\.md)(?:,| section|:) ((?:\"[^\"]+\"(?:, | and |))+)")
    broken, cited = [], 0
    for file in files:
        text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", file.read_text(errors="replace"))
        for name, quoted in cite.findall(text):
            page = ROOT / name if name.startswith("docs/") else (file.parent / name)
            if not page.exists():
                page = ROOT / "docs" / name
            for section in re.findall(r"\"([^\"]+)\"", quoted):
                section = section.replace("`", "").rstrip(".,;")
                if section in PENDING or not page.exists():
                    continue
                cited += 1
                if not any(s.startswith(section) for s in _sections(page)):
                    broken.append(f"{file.relative_to(ROOT)}: {name}, {section!r}")
    assert not broken, "sections cited that their page lacks:\n" + "\n".join(broken)
    assert cited > 20  # the scan finds the citations


# ---- every fenced command as written (README.md and the datasets page) -------------------------------------------
COMMAND_PAGES = [ROOT / "README.md", ROOT / "docs" / "datasets.md"]
BANNED_TERMS = ("machine D", "draw 0", "draw 7", "sampled draws", "before the back-off")
"""Words the front page once used without saying what they are."""


def _train_outputs() -> dict[str, str]:
    """What ``make train`` writes that the commands name: its run folder and its benchmark folder, as
    ``experiments/embedded_main.yaml`` places them."""
    import yaml

    config = yaml.safe_load((ROOT / "experiments" / "embedded_main.yaml").read_text())
    return {"run": f"runs/{config['name']}", "data": config["data"]["benchmark"]["root"]}


def fenced_commands(page: Path) -> list[list[str]]:
    """Each ``autagent ...`` line of the page's bash blocks as argv (comments, ``&`` and redirections
    dropped; a ``$(autagent ...)`` inside kept as one word)."""
    import shlex

    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.S | re.M):
        for line in block.splitlines():
            if not line.startswith("autagent "):
                continue
            words = shlex.split(re.sub(r"\$\(([^)]*)\)", lambda m: "'$(" + m.group(1) + ")'", line), comments=True)
            words = [w for w in words if w != "&"]
            if ">" in words:
                words = words[: words.index(">")]
            commands.append(words[1:])
    return commands


def test_the_cli_is_spelled_one_way_and_every_fenced_command_parses():
    parser = build_parser()
    commands = [c for page in COMMAND_PAGES for c in fenced_commands(page)]
    assert len(commands) >= 8
    for argv in commands:
        inner = [w for w in argv if w.startswith("$(")]
        for word in inner:  # $(autagent plugin verify DIR --hash): a command of its own
            parser.parse_args(word[2:-1].split()[1:])
        try:
            parser.parse_args(["0" * 64 if w.startswith("$(") else w for w in argv])
        except SystemExit:
            pytest.fail(f"README command does not parse: autagent {' '.join(argv)}")
    fenced = "\n".join(re.findall(r"^```bash\n(.*?)^```", README, re.S | re.M))
    assert not re.search(r"^\.venv/bin/autagent", fenced, re.M), "one spelling: `autagent` after activating .venv"


def test_every_file_a_fenced_command_names_exists_or_is_made_or_fetched_as_documented():
    """In the repository; or written by ``make train`` (its run and benchmark folders); or a published
    benchmark file the datasets page says where to get; or an output the command itself writes."""
    made = _train_outputs()
    datasets = (ROOT / "docs" / "datasets.md").read_text()
    missing = []
    for page in COMMAND_PAGES:
        for argv in fenced_commands(page):
            outputs = {argv[i + 1] for i, w in enumerate(argv[:-1]) if w == "--out"}
            for word in argv:
                if "/" not in word or word.startswith(("$(", "http")) or word in outputs:
                    continue
                if word.startswith((made["run"], made["data"])):
                    continue
                if word.startswith("data/") and Path(word).name in datasets:
                    continue
                if not (ROOT / word).exists():
                    missing.append(f"{page.name}: {word}")
    assert not missing, f"fenced commands name files nothing makes: {missing}"
    assert "data/embedded/audio/test/test-00000.wav".startswith(made["data"])  # the clip the README uses


@pytest.fixture(scope="module")
def train_outputs(tiny_bench, tmp_path_factory):
    """Stand-ins for what ``make train`` writes: a plugin over the seven tools (untrained weights) and the
    test benchmark's folder, laid out as the README names them."""
    import torch

    from autagent.plugin.manifest import PluginTarget
    from autagent.policies.router.export import RouterParts, export_router
    from autagent.policies.router.features import Featurizer
    from autagent.policies.router.model import Router, RouterConfig

    torch.manual_seed(0)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(), len(tiny_bench["tools"]))
    folder = tmp_path_factory.mktemp("run") / "plugin"
    export_router(
        PluginTarget(folder, tiny_bench["tools"], "embedded", {}, 30.0, {"name": "readme"}, {}),
        RouterParts(router, featurizer),
    )
    return {"plugin": str(folder), "data": str(tiny_bench["root"] / "data")}


def test_the_readme_commands_that_run_offline_run_as_written(train_outputs, capsys):
    """``select`` (one clip, explained; a batch) and ``plugin verify --hash`` as the README writes them,
    on stand-ins of make train's outputs; the hash they print pins the plugin."""
    from autagent.cli import main

    made = _train_outputs()

    def as_run(word: str) -> str:
        word = word.replace(f"{made['run']}/plugin", train_outputs["plugin"])
        return word.replace(made["data"], train_outputs["data"])

    ran = []
    for argv in fenced_commands(ROOT / "README.md"):
        if argv[0] not in ("select", "plugin"):
            continue
        argv = [as_run(w) for w in argv]
        capsys.readouterr()
        assert main(argv) == 0, f"autagent {' '.join(argv)}: {capsys.readouterr().err}"
        out = capsys.readouterr().out
        if "--batch" in argv:
            lines = [json.loads(line) for line in out.splitlines()]
            assert len(lines) == len(json.loads(Path(argv[argv.index("--batch") + 1]).read_text()))
        elif "--explain" in argv:
            assert out.startswith("tools called: ") and "decided by" in out
        ran.append(argv[0])
    assert ran.count("select") == 2
    for argv in fenced_commands(ROOT / "README.md"):
        inner = [w[2:-1].split()[1:] for w in argv if w.startswith("$(")]
        for command in inner:  # the pin: $(autagent plugin verify runs/embedded_main/plugin --hash)
            capsys.readouterr()
            assert main([as_run(w) for w in command]) == 0
            digest = capsys.readouterr().out.strip()
            assert re.fullmatch(r"[0-9a-f]{64}", digest)
            pinned = ["select", "--plugin", train_outputs["plugin"], "--plugin-sha256", digest]
            clip = as_run(f"{made['data']}/audio/test/test-00000.wav")
            assert main([*pinned, "--audio", clip, "--question", "How fast is it?"]) == 0


def test_the_request_json_in_the_readme_is_what_the_service_reads(tmp_path, click_wav):
    import base64

    from autagent.reasoners.messages import read_query

    block = re.search(r"`request\.json`.*?^```json\n(.*?)^```", README, re.S | re.M)
    assert block, "the README shows request.json beside the curl line"
    body = json.loads(block.group(1))
    part = next(p for p in body["messages"][-1]["content"] if p["type"] == "input_audio")
    part["input_audio"]["data"] = base64.b64encode(Path(click_wav[0]).read_bytes()).decode()
    query = read_query(body["messages"], body.get("choices"), tmp_path, 25 << 20)
    assert query.question == "How fast is it?" and query.choices == ("90 BPM", "120 BPM")
    assert Path(query.audio).read_bytes() == Path(click_wav[0]).read_bytes()
    assert "`/docs`" in README and "/v1/select" in README and "--hash" in README


def test_the_front_page_says_what_its_figures_are_on_and_uses_no_undefined_terms():
    table = README.index("<!-- table: make_train -->")
    assert "simulator" in README[README.index("## Results") : table]
    used = [term for term in BANNED_TERMS if term in README]
    assert not used, f"README.md uses terms it does not define: {used}"
    assert "](docs/datasets.md)" in README and "[command line](#command-line)" in README

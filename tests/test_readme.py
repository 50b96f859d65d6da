"""The README's map and the docs' cross-references point at things that exist: every repository path the
README names, every `make` target and `autagent` command, every relative link (file and #anchor) of the
README and docs/, and every section a file cites by name (``docs/results/cascade.md, "What the budget
costs"``). Reads files only: fast."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from autagent.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Names the README gives of files a run or a plugin writes, not of files in the repository.
RUN_OUTPUTS = {"manifest.json", "metrics.json", "report.md"}
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
    assert "autagent/cli.py" in named and "experiments/embedded_main.yaml" in named  # the scan reads the map


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


def test_every_section_cited_by_name_exists():
    """``docs/results/transfer.md, "Unfamiliar choices"``, in code, configs and docs: the page has a heading
    or a bold lead starting with that name (wrapped lines and comment marks joined first)."""
    files = [p for p in ROOT.rglob("*") if p.suffix in {".py", ".yaml", ".md"} and ".venv" not in p.parts]
    cite = re.compile(r"((?:docs/)?(?:results/)?[\w-]+\.md)(?:,| section|:) ((?:\"[^\"]+\"(?:, | and |))+)")
    broken, cited = [], 0
    for file in files:
        if ".cache" in file.parts or "runs" in file.parts:
            continue
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

"""The house's rooms stay readable (issue 64, item 4): no module in autagent/, tools/ or rewards/ (nor
scripts/gpu_check.py) over 400 lines but the ones named below with why, and the dead code it named stays gone."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MOST_LINES = 400
LONGER = {
    "autagent/data/generator/phrasings.py": "the generator's phrase tables: data, read as a list",
}


def test_no_module_is_longer_than_four_hundred_lines_but_the_named_ones():
    modules = [p for top in ("autagent", "tools", "rewards") for p in (ROOT / top).rglob("*.py")]
    modules.append(ROOT / "scripts" / "gpu_check.py")
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules
        if (n := len(p.read_text().splitlines())) > MOST_LINES and str(p.relative_to(ROOT)) not in LONGER
    }
    assert not long, long


def test_the_dead_code_issue_64_named_is_gone():
    from autagent.data.generator import kinds
    from autagent.plugin import manifest
    from autagent.policies.lm import recipe
    from autagent.policies.router.table import AnswerTable
    from autagent.serve.limits import AudioStore

    assert not hasattr(kinds, "_level") and not hasattr(AnswerTable, "asked_share")
    assert not hasattr(recipe, "has_checkpoints") and not hasattr(AudioStore, "lease")
    # a run writes its plugin once (the LM's too): nothing rewrites a card or exports a folder by the old path
    assert not hasattr(manifest, "update_card") and not hasattr(manifest, "export_plugin")

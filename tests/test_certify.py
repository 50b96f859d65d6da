"""Paired intervals and ``adapt --certify``: the exact paired interval's numbers, the default margin's computation,
the fixed sequence that stops at the first point that fails, and a certificate on a tiny reasoner whose right
answers are known."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import beta

from autagent.data.sample import Sample
from autagent.evaluation.paired import certifiable_eps, paired_difference
from autagent.plugin.dial import Dial, certified_dial, dialled
from autagent.policies.router.table import CertifyConfig
from autagent.reasoners.base import CachedReasoner, Reply
from autagent.recipes.certify import DEFAULT_EPS, certify, fixed_sequence, held_out_queries

TOOLS = ("asr", "emotion", "chords")
SECONDS = {"asr": 1.0, "emotion": 0.1, "chords": 0.5}


def test_the_paired_interval_is_exact_mcnemar_over_the_discordant_items():
    # 50 items: 10 only `other` gets right, 2 only `reference`, 30 both, 8 neither
    reference = [False] * 10 + [True] * 2 + [True] * 30 + [False] * 8
    other = [True] * 10 + [False] * 2 + [True] * 30 + [False] * 8
    got = paired_difference(reference, other)
    assert (got["other_only"], got["reference_only"], got["n"]) == (10, 2, 50)
    assert got["difference"] == pytest.approx(0.16)
    low_p, high_p = beta.ppf(0.025, 10, 3), beta.ppf(0.975, 11, 2)
    assert got["interval"] == [round((2 * low_p - 1) * 12 / 50, 4), round((2 * high_p - 1) * 12 / 50, 4)]
    assert got["interval"][0] > 0  # 10 against 2 tells them apart at 95 %
    swapped = paired_difference(other, reference)
    assert swapped["interval"] == [-got["interval"][1], -got["interval"][0]]
    lower = paired_difference(reference, other, sided="lower")
    assert got["interval"][0] < lower["interval"][0] < got["difference"] and lower["interval"][1] == 1.0
    assert paired_difference([True, False], [True, False])["interval"] == [0.0, 0.0]  # agree everywhere
    with pytest.raises(ValueError, match="different items"):
        paired_difference([True], [True, False])


def test_the_default_margin_is_what_the_default_budget_can_certify_at_80_percent_power():
    n = held_out_queries(3000)
    assert n == 200  # 1,000 answers at 5 a query: All-Tools, K = 1..3, the threshold
    assert certifiable_eps(n, 0.25) == pytest.approx((1.6449 + 0.8416) * (0.25 / 200) ** 0.5, abs=1e-4)
    assert DEFAULT_EPS == round(certifiable_eps(n, 0.25), 2) == CertifyConfig().eps == 0.09


def test_the_fixed_sequence_stops_at_the_first_point_that_fails():
    """Dearest first: K=2 passes, K=1 fails, so K=0 is never tested even though it would pass on its own."""
    n = 40
    all_tools = [True] * 20 + [False] * 20
    correct = {"K=2": list(all_tools), "K=1": [False] * 20 + [False] * 20, "K=0": list(all_tools)}
    points = [{"label": k} for k in ("K=2", "K=1", "K=0")]
    rows = fixed_sequence(points, all_tools, correct, CertifyConfig(enabled=True, eps=0.05))
    assert [r["passed"] for r in rows] == [True, False, None]
    assert rows[0]["difference"] == 0.0 and rows[1]["difference"] == -0.5 and rows[0]["lower_bound"] == 0.0
    assert len(all_tools) == n


class Additive:
    """The labelled tool's record adds 1 to the right choice, every other record 0.45 to a wrong one, no tool
    0.2 to that wrong one: the labelled tool alone or with one other is right, all three are wrong."""

    name = "additive"

    def fingerprint(self) -> str:
        return "additive-1"

    def answer_many(self, requests):
        out = []
        for sample, records in requests:
            scores = [0.0, 0.2, 0.0]
            for record in records or []:
                scores[0 if record["tool"] in sample.meta["tools"] else 1] += (
                    1.0 if record["tool"] in sample.meta["tools"] else 0.45
                )
            out.append(Reply(sample.choices[max(range(3), key=scores.__getitem__)]))
        return out


class RankedPlugin:
    """Ranks each query's labelled tool first; its threshold calls every tool (so it is All-Tools)."""

    def __init__(self, samples):
        self.tools, self.dial, self.manifest = list(TOOLS), None, {"tool_seconds": SECONDS}
        self.probs = {s.id: torch.tensor([0.9 if t in s.meta["tools"] else 0.6 for t in TOOLS]) for s in samples}

    def select_many(self, samples):
        probs = torch.stack([self.probs[s.id] for s in samples])
        return dialled((probs > 0.5).float(), probs, self.tools, self.dial, SECONDS)


def test_a_certificate_names_the_cheapest_point_that_provably_loses_nothing(tmp_path):
    samples = [
        Sample(f"q{i}", "", f"question {i}", ("a", "b", "c"), "a", "speech", "", {"tools": [TOOLS[i % 3]]})
        for i in range(30)
    ]
    records = {s.id: {t: {"tool": t, "output": f"{t} of {s.id}"} for t in TOOLS} for s in samples}
    reasoner = CachedReasoner(Additive(), tmp_path / "answers")
    plugin = RankedPlugin(samples)
    got = certify(plugin, samples, records, reasoner, TOOLS, CertifyConfig(enabled=True, eps=0.05))
    # All-Tools is wrong everywhere, K = 1 and K = 2 right everywhere: every point passes, K = 1 is cheapest
    assert got["certified"] and got["label"] == "K=1" and got["point"] == {"tools": 1}
    assert got["n"] == 30 and got["all_tools_accuracy"] == 0.0 and got["accuracy"] == 1.0 and got["avg_tools"] == 1.0
    from autagent.plugin.card import certificate_lines

    assert certificate_lines(got)[0].startswith("certificate: K=1 (1.00 tools a query) loses at most 5.0 points")
    assert got["difference"] == 1.0 and got["lower_bound"] > 0.8
    assert [r["label"] for r in got["tested"]] == ["threshold", "K=2", "K=1"]  # dearest first
    assert got["tool_seconds"]["serial"] < got["all_tools_seconds"]["serial"] == 1.6
    assert got["reasoner"] == "additive-1" and plugin.dial is None  # the plugin's own dial put back
    assert certified_dial({"certificate": got}) == Dial(tools=1)
    assert reasoner.calls == 30 * 3  # All-Tools (= the threshold), K = 2, K = 1: each distinct answer once


def test_nothing_certified_means_every_tool(tmp_path):
    samples = [Sample(f"q{i}", "", f"q {i}", ("a", "b", "c"), "a", "speech", "", {"tools": ["asr"]}) for i in range(30)]
    records = {s.id: {t: {"tool": t, "output": t} for t in TOOLS} for s in samples}

    class Opposite(Additive):  # with every tool right, with fewer wrong
        def answer_many(self, requests):
            return [Reply("a" if records_ and len(records_) == 3 else "b") for _, records_ in requests]

    plugin = RankedPlugin(samples)
    plugin.probs = {s.id: torch.tensor([0.9, 0.2, 0.1]) for s in samples}  # its threshold calls asr alone
    got = certify(
        plugin, samples, records, CachedReasoner(Opposite(), tmp_path / "a"), TOOLS, CertifyConfig(enabled=True)
    )
    assert not got["certified"] and got["point"] == {"tools": 3} and got["label"].startswith("every tool")
    assert got["tested"][0]["passed"] is False and all(r["passed"] is None for r in got["tested"][1:])

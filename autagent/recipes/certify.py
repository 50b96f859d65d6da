"""``autagent adapt --certify EPS``: the cheapest operating point of an adapted plugin that provably loses at
most ``EPS`` points of accuracy against All-Tools on the reasoner in front of it.

Why: on a reasoner that gains little from choosing (Gemma 3 270M barely uses the one revealing record),
what a plugin can buy is cost: All-Tools' accuracy with fewer tools.  A user adopting the cheaper setting
wants that said with a stated confidence, on their own model, before they ship it.

How (Learn then Test's fixed-sequence testing):

1. Part of the budget's training queries is **held out** before the answer table is filled
   (``policy.router.table.held_out``: the last queries of the table's order, never asked for training).
2. After training, the exported plugin selects for each held-out query at each candidate point: the trained
   threshold and exactly the K most probable tools for K = 1..``max_k`` (the dial's ``--tools K``: the same
   function the service runs), and All-Tools; the reasoner answers each distinct (query, subset) once,
   through the answer cache.
3. The points are ordered **dearest first** by their measured tool-seconds per answer (from selections
   alone, before any answer is scored) and tested in that order: point p passes when the exact one-sided
   lower bound (:func:`autagent.evaluation.paired.paired_difference`) of its accuracy minus All-Tools' is
   at least ``−EPS``; testing stops at the first point that fails.  Each test runs at the full level
   ``1 − confidence``, and the fixed sequence keeps the chance that any passed point truly loses more than
   ``EPS`` below it (the family-wise error), so the guarantee holds for the point chosen: the cheapest
   that passed.  (Testing cheapest first and keeping the first that passes would need a Bonferroni
   correction over the points to say as much.)
4. The certificate (point, EPS, n, the bound, the reasoner's fingerprint, every test) goes into the
   plugin's manifest and model card; ``serve``, ``select`` and ``eval`` use the certified point unless
   told otherwise (``--tools``, ``--max-tools``, ``--latency-budget-ms``, ``--uncertified``).  When no
   point passes, the certificate says so and its point is every tool.

The default EPS is what the default budget can certify (:data:`DEFAULT_EPS`; docs/results/cascade.md says
the computation): a paired one-sided bound over n items lies about ``1.645·sqrt(d/n)`` below the observed
difference (d: the share of items on which exactly one of the two is right), so a point truly level with
All-Tools passes with 80 % power when ``EPS ≥ (1.645 + 0.842)·sqrt(d/n)``.
"""

from __future__ import annotations

from rewards.scoring import is_correct

from ..config import ConfigError
from ..evaluation.paired import certifiable_eps, paired_difference
from ..plugin.dial import Dial, recorded_seconds, select_at, tool_seconds_of
from ..policies.router.export import RouterDraft
from ..policies.router.table import CertifyConfig, held_out_ids
from ..reasoners.base import ask_with_records

DEFAULT_BUDGET = 3000
"""``autagent adapt``'s default budget of answers."""
DEFAULT_SHARE = 1 / 3
"""The share of the budget's answers spent on held-out queries."""
DEFAULT_MAX_K = 3
"""Candidate points: the threshold and K = 1..3 most probable tools (dearer points rarely save cost)."""
ASSUMED_DISCORDANT_SHARE = 0.25
"""The share of items on which a cheap point and All-Tools disagree in correctness, assumed for the default
EPS (each certificate records the share it observed and the EPS that share would have certified)."""


def answers_per_query(max_k: int) -> int:
    """Distinct subsets asked per held-out query at most: All-Tools, K = 1..max_k and the threshold's."""
    return max_k + 2


def held_out_queries(budget: int, share: float = DEFAULT_SHARE, max_k: int = DEFAULT_MAX_K) -> int:
    """How many training queries a budget's certification share holds out."""
    return int(budget * share) // answers_per_query(max_k)


DEFAULT_EPS = round(certifiable_eps(held_out_queries(DEFAULT_BUDGET), ASSUMED_DISCORDANT_SHARE), 2)
"""0.09: (1.645 + 0.842)·sqrt(0.25 / 200) = 0.088, 200 held-out queries at the default budget of 3,000 answers
(1,000 answers at 5 per query: All-Tools, K = 1, 2, 3 and the threshold's selection)."""


def candidate_points(tool_ids, max_k: int) -> list[tuple[str, Dial | None]]:
    """(label, dial) of every candidate: the threshold (no dial) and K = 1..max_k (below the tool count)."""
    points: list[tuple[str, Dial | None]] = [("threshold", None)]
    points += [(f"K={k}", Dial(tools=k)) for k in range(1, min(max_k, len(tool_ids) - 1) + 1)]
    return points


def selections(plugin, samples, points) -> dict[str, list[tuple[str, ...]]]:
    """Each point's subsets on ``samples`` from the loaded plugin's own ``select_many`` (its dial put back)."""
    return {name: select_at(plugin, samples, dial) for name, dial in points}


def answer_all(reasoner, samples, records, chosen: dict[str, list]) -> dict[str, list[bool]]:
    """Each point's correctness per sample, each distinct (sample, subset) asked once (the answer cache)."""
    pairs = list(dict.fromkeys((i, z) for subsets in chosen.values() for i, z in enumerate(subsets)))
    replies = ask_with_records(reasoner, [samples[i] for i, _ in pairs], records, [z for _, z in pairs])
    failed = sum(r.error is not None for r in replies)
    if failed:
        raise ConfigError(
            f"certification: {failed} of {len(replies)} answers failed on the reasoner; nothing was certified "
            "(the answers it gave are cached: re-run with --resume)"
        )
    right = {pair: is_correct(samples[pair[0]], r.text) for pair, r in zip(pairs, replies)}
    return {name: [right[(i, z)] for i, z in enumerate(subsets)] for name, subsets in chosen.items()}


def fixed_sequence(points: list[dict], all_tools: list[bool], correct: dict, cfg: CertifyConfig) -> list[dict]:
    """Test ``points`` (dearest first) against All-Tools until one fails; each row gains its paired
    difference, one-sided lower bound and ``passed`` (None for points never tested)."""
    rows, going = [], True
    for point in points:
        paired = paired_difference(all_tools, correct[point["label"]], cfg.confidence, sided="lower")
        low = paired["interval"][0]
        passed = (low >= -cfg.eps - 1e-12) if going else None
        going = going and bool(passed)
        rows.append(point | {"difference": round(paired["difference"], 4), "lower_bound": low, "passed": passed})
    return rows


def certify(plugin, samples, records, reasoner, tool_ids, cfg: CertifyConfig) -> dict:
    """The certificate of ``plugin`` on the held-out ``samples`` (see the module's docstring)."""
    if not samples:
        raise ConfigError("certification: no held-out query (raise --budget or the certify share)")
    tool_ids = tuple(tool_ids)
    seconds = recorded_seconds(plugin.manifest)
    points = candidate_points(tool_ids, cfg.max_k)
    chosen = selections(plugin, samples, points) | {"all_tools": [tool_ids] * len(samples)}
    before = reasoner.calls
    correct = answer_all(reasoner, samples, records, chosen)
    asked = reasoner.calls - before
    cost = {name: tool_seconds_of(subsets, seconds) for name, subsets in chosen.items()}
    described = {name: (dial.describe() if dial else {}) for name, dial in points}
    rows = []
    for name, _ in points:
        n_tools = sum(len(z) for z in chosen[name]) / len(samples)
        spent = cost[name]
        rows.append({"label": name, "point": described[name], "avg_tools": round(n_tools, 4), "tool_seconds": spent})
    # dearest first, by measured seconds one by one where every tool has them, else by tools per query
    rows.sort(key=lambda r: (-(r["tool_seconds"] or {}).get("serial", r["avg_tools"]), -r["avg_tools"]))
    tested = fixed_sequence(rows, correct["all_tools"], correct, cfg)
    passed = [r for r in tested if r["passed"]]
    best = passed[-1] if passed else None
    n = len(samples)
    all_accuracy = sum(correct["all_tools"]) / n
    cheapest = tested[-1]["label"]
    discordant = sum(a != b for a, b in zip(correct["all_tools"], correct[cheapest])) / n
    return {
        "certified": best is not None,
        "point": best["point"] if best else {"tools": len(tool_ids)},
        "label": best["label"] if best else "every tool (nothing certified)",
        "avg_tools": best["avg_tools"] if best else float(len(tool_ids)),
        "eps": cfg.eps,
        "confidence": cfg.confidence,
        "n": n,
        "difference": best["difference"] if best else 0.0,
        "lower_bound": best["lower_bound"] if best else 0.0,
        "accuracy": round(sum(correct[best["label"]]) / n, 4) if best else round(all_accuracy, 4),
        "all_tools_accuracy": round(all_accuracy, 4),
        "tool_seconds": best["tool_seconds"] if best else cost["all_tools"],
        "all_tools_seconds": cost["all_tools"],
        "reasoner": reasoner.fingerprint(),
        "answers_asked": asked,
        "method": "fixed-sequence test, dearest point first; exact one-sided paired (McNemar) bound per point",
        "tested": tested,
        "power": {
            "discordant_share_observed": round(discordant, 4),
            "eps_certifiable_at_80_percent": round(certifiable_eps(n, discordant, 1 - cfg.confidence), 4)
            if discordant
            else 0.0,
        },
    }


def certify_run(ctx, draft: RouterDraft) -> dict:
    """The run's trained plugin, not yet written, certified on its held-out training queries (``ctx``: the
    run's :class:`autagent.recipes.run.RunContext`, whose records cover every training query and whose reasoner
    answers through the shared cache); the certificate put into the plugin's manifest (its model card shows it
    once the plugin is written) and returned."""
    table = ctx.config.policy.router.table
    held = held_out_ids([s.id for s in ctx.splits.train], table.order_seed, table.held_out)
    samples = [s for s in ctx.splits.train if s.id in held]
    certificate = certify(draft.open(), samples, ctx.records, ctx.reasoner, ctx.tool_ids, table.certify)
    draft.manifest["certificate"] = certificate
    return certificate

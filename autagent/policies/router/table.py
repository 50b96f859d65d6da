"""An answer table: what a deterministic reasoner answers for a designed set of tool subsets of each
training query, asked once before training, within a budget of answers.

Why: a frozen reasoner answers the same (query, subset) the same way, and the answer cache serves every
repeat, so GRPO's draws mostly re-ask what is known (about 45 % of a cascade run's draws) while the
subsets that tell most about a query (each tool alone, all of them) are asked only when the policy
happens to draw them.  The table asks them up front, per query: no tool, each tool alone, all tools and
optionally each tool left out of all (``design``), and keeps each answer's choice scores.  Training then
reads it (:mod:`.exact` computes the policy's exact expected reward over every subset; sampled GRPO draws
are served from it) and cross-validation scores held-out queries from it, with no reasoner in the loop.

A subset never asked is answered by the **surrogate**: with choice scores, tools add their effects on
each choice's score, s(S) = s(A) ± Σ (s(A ± t) − s(A)), from the nearer anchor A (no tool with the
singles, or all tools with the leave-one-outs); without scores, the answer of the nearest asked subset.
:meth:`AnswerTable.surrogate_fidelity` says how often the surrogate gives the answer the reasoner gave,
on asked subsets it is made to predict without.

The budget counts every answer the reasoner is asked (the no-tool ones included); answers already in the
cache are free.  At the cap the table stops asking and keeps what it has: queries whose design is
complete train, the others are left out (and counted).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rewards.scoring import is_correct

from ...data.sample import Sample
from .crossval import CrossValConfig

DESIGNS = ("empty", "singles", "all", "leave_one_out")
OUTSIDE = ("ask", "surrogate")
UNASKED = ("surrogate", "excluded")
Subset = tuple[str, ...]


@dataclass
class CertifyConfig:
    """``policy.router.table.certify``: what ``autagent adapt --certify EPS`` sets (:mod:`autagent.recipes.certify`)."""

    enabled: bool = False
    """Certify after training, on the ``held_out`` queries (which must be > 0)."""
    eps: float = 0.09
    """The largest loss in accuracy against All-Tools (a fraction: 0.09 is 9 points) a certified point may have
    (the default: what adapt's default budget can certify, :data:`autagent.recipes.certify.DEFAULT_EPS`)."""
    confidence: float = 0.95
    """The one-sided confidence of each test (and of the whole fixed sequence)."""
    share: float = 1 / 3
    """The share of the budget's answers ``autagent adapt`` spends on held-out queries."""
    max_k: int = 3
    """The largest K whose K-most-probable point is a candidate (beside the threshold)."""

    def __post_init__(self):
        if not 0 <= self.eps < 1:
            raise ValueError(f"policy.router.table.certify.eps is a fraction of accuracy in [0, 1), got {self.eps}")
        if not 0.5 <= self.confidence < 1:
            raise ValueError(f"policy.router.table.certify.confidence must lie in [0.5, 1), got {self.confidence}")
        if not 0 < self.share < 1:
            raise ValueError(f"policy.router.table.certify.share must lie strictly between 0 and 1, got {self.share}")
        if not isinstance(self.max_k, int) or self.max_k < 1:
            raise ValueError(f"policy.router.table.certify.max_k must be a whole number >= 1, got {self.max_k!r}")


@dataclass
class TableConfig:
    enabled: bool = False
    """Ask the reasoner a designed set of subsets per training query before training, and train from
    those answers (off: GRPO asks what it draws, as the paper does)."""
    design: list = field(default_factory=lambda: ["empty", "singles", "all"])
    """The subsets asked per query: any of empty (no tool), singles (each tool alone), all (every tool),
    leave_one_out (every tool but one)."""
    budget: int | None = None
    """Distinct reasoner answers this run may ask, table and training together (cache hits are free);
    None: no cap. At the cap the run stops asking and trains on what it has."""
    order_seed: int = 0
    """The order in which queries enter the table (a budget cuts it): fixed apart from the run's seed,
    so runs of several seeds ask the same queries and share their answers."""
    outside: str = "surrogate"
    """A sampled draw outside the table: ``ask`` the reasoner (while the budget lasts, then the
    surrogate) or take the ``surrogate``'s answer."""
    items_per_call: int = 4
    """Queries whose designed subsets go to the reasoner in one call (a cascade shares their prompts)."""
    unasked: str = "surrogate"
    """The exact objective's subsets the reasoner was never asked: scored by the ``surrogate``, or
    ``excluded`` (the expectation is over the asked subsets alone, the policy's probabilities
    renormalised over them: training reads the reasoner's own answers only)."""
    budget_counts: str = "asked"
    """``asked``: the budget caps the answers the reasoner is asked, and answers already in the cache are
    free (a user's budget); ``used``: it caps the answers the table holds, asked or cached, so that what a
    budget buys does not depend on what earlier runs left in a shared cache (experiments comparing
    budgets): the table takes the first budget / (subsets per query) queries of its order."""
    crossval: CrossValConfig = field(default_factory=CrossValConfig)
    """Settings chosen by k-fold cross-validation on the training queries' table (:mod:`.crossval`)."""
    held_out: int = 0
    """Training queries kept out of the table and of training (the last ones of the table's order), for
    ``autagent adapt --certify`` to test the trained plugin on (:func:`held_out_ids`)."""
    certify: CertifyConfig = field(default_factory=CertifyConfig)
    """After training, certify the plugin's cheapest safe operating point on the held-out queries
    (:mod:`autagent.recipes.certify`)."""

    def __post_init__(self):
        unknown = [d for d in self.design if d not in DESIGNS]
        if unknown or "empty" not in self.design:
            raise ValueError(
                f"policy.router.table.design must hold 'empty' and any of {list(DESIGNS)}, got {self.design}"
            )
        if self.budget is not None and (not isinstance(self.budget, int) or self.budget < 1):
            raise ValueError(f"policy.router.table.budget must be a positive integer or null, got {self.budget!r}")
        if self.outside not in OUTSIDE:
            raise ValueError(f"policy.router.table.outside must be one of {list(OUTSIDE)}, got {self.outside!r}")
        if self.unasked not in UNASKED:
            raise ValueError(f"policy.router.table.unasked must be one of {list(UNASKED)}, got {self.unasked!r}")
        if self.budget_counts not in ("asked", "used"):
            raise ValueError(f"policy.router.table.budget_counts must be 'asked' or 'used', got {self.budget_counts!r}")
        if not isinstance(self.held_out, int) or self.held_out < 0:
            raise ValueError(f"policy.router.table.held_out must be a whole number >= 0, got {self.held_out!r}")
        if self.certify.enabled and not self.held_out:
            raise ValueError(
                "policy.router.table.certify.enabled needs held-out queries (policy.router.table.held_out)"
            )
        if self.items_per_call < 1:
            raise ValueError(f"policy.router.table.items_per_call must be >= 1, got {self.items_per_call}")


def designed_subsets(tool_ids, design) -> list[Subset]:
    """The subsets a design asks, no tool first (the differential reward's baseline), without repeats."""
    tools = tuple(tool_ids)
    out: list[Subset] = [()]
    if "singles" in design:
        out += [(t,) for t in tools]
    if "all" in design:
        out.append(tools)
    if "leave_one_out" in design:
        out += [tuple(x for x in tools if x != t) for t in tools]
    return list(dict.fromkeys(out))


def every_subset(tool_ids) -> list[Subset]:
    """All 2^T subsets of the tools, each in the run's tool order, the empty one first."""
    tools = tuple(tool_ids)
    return [tuple(t for t, on in zip(tools, bits) if on) for bits in itertools.product((0, 1), repeat=len(tools))]


class Budget:
    """Distinct reasoner answers a run may still ask; what it spent is kept in ``path`` (JSON) so that a
    resumed run goes on counting where the stopped one was."""

    def __init__(self, limit: int | None, path: str | Path | None = None):
        self.limit, self.path = limit, Path(path) if path else None
        self.spent = 0
        if self.path is not None and self.path.exists():
            self.spent = int(json.loads(self.path.read_text()).get("spent", 0))

    @property
    def left(self) -> int | None:
        return None if self.limit is None else max(self.limit - self.spent, 0)

    @property
    def exhausted(self) -> bool:
        return self.left == 0

    def charge(self, answers: int) -> None:
        self.spent += answers
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"spent": self.spent, "limit": self.limit}))


class BudgetError(ValueError):
    """A budget that cannot buy what a run needs (said before anything is spent where it can be)."""


def ask_within(reasoner, requests: list, budget: Budget) -> list:
    """The cached reasoner's replies to ``requests``, asking at most what the budget has left (None for
    the rest); the answers received are charged, a failed call is not (a server that was down costs nothing,
    and a ``--resume`` against it working again finds the budget as it was)."""
    before, failed = reasoner.calls, getattr(reasoner, "failures", 0)
    try:
        replies = reasoner.ask(requests, max_new=budget.left)
    finally:  # answers that arrived before a failure are kept in the cache, and charged
        budget.charge((reasoner.calls - before) - (getattr(reasoner, "failures", 0) - failed))
    reasoner.check_health()
    return replies


def query_order(ids, order_seed: int) -> list[str]:
    """The order in which the table's queries enter it: a shuffle of the sorted ids fixed by
    ``order_seed`` alone (not the run's seed), so that every run and script over one training split
    asks, and a budget buys, the same queries first."""
    ids = sorted(ids)
    return [ids[i] for i in np.random.default_rng(order_seed).permutation(len(ids))]


def held_out_ids(ids, order_seed: int, count: int) -> set[str]:
    """The ``count`` queries a certification holds out: the last of the table's order, the ones a budget
    reaches last (the router's recipe keeps them out of the table and training)."""
    return set(query_order(ids, order_seed)[len(list(ids)) - count :]) if count > 0 else set()


class AnswerTable:
    """(query id, subset) -> (answer, choice scores) for the queries of a run, with the surrogate."""

    def __init__(self, samples: list[Sample], tool_ids, design=("empty", "singles", "all")):
        self.samples = {s.id: s for s in samples}
        self.tool_ids = tuple(tool_ids)
        self.design = designed_subsets(self.tool_ids, design)
        self.answers: dict[str, dict[Subset, tuple[str | None, tuple | None]]] = {s.id: {} for s in samples}
        """query id -> subset -> (the reasoner's answer, its choice scores)."""
        self._version = 0
        self.incomplete: list[str] = []
        """Queries whose design the budget did not cover (left out of training)."""

    # -- filling -----------------------------------------------------------------------------------
    def fill(
        self,
        reasoner,
        records: dict,
        budget: Budget,
        order_seed: int = 0,
        items_per_call: int = 4,
        bar=None,
        counts: str = "asked",
    ):
        """Ask every query's designed subsets, queries in a fixed shuffled order, ``items_per_call``
        queries per call, until the budget is spent (``counts``: see :attr:`TableConfig.budget_counts`).
        A failing reasoner raises after the answers so far are in its cache (a resumed run is served
        them free)."""
        order = query_order(self.samples, order_seed)
        if counts == "used" and budget.limit is not None:  # as many queries as a cold cache would give
            self.incomplete += order[budget.limit // len(self.design) :]
            order = order[: budget.limit // len(self.design)]
        for start in range(0, len(order), items_per_call):
            chunk = order[start : start + items_per_call]
            if budget.exhausted and not all(self._cached(reasoner, records, sid) for sid in chunk):
                self.incomplete += [sid for sid in chunk if not self._cached(reasoner, records, sid)]
                chunk = [sid for sid in chunk if sid not in self.incomplete]
                if not chunk:
                    continue
            keys = [(sid, z) for sid in chunk for z in self.design]
            requests = [(self.samples[sid], self._shown(records, sid, z)) for sid, z in keys]
            for key, reply in zip(keys, ask_within(reasoner, requests, budget)):
                if reply is not None and reply.error is None:
                    self.answers[key[0]][key[1]] = (reply.text, reply.scores)
            self._version += 1
            for sid in chunk:
                if not self.complete(sid):
                    self.incomplete.append(sid)
            if bar is not None:
                bar.update(len(chunk))
                bar.set_postfix(spent=budget.spent, refresh=False)
        return self

    def _cached(self, reasoner, records, sid: str) -> bool:
        return all(reasoner.is_cached(self.samples[sid], self._shown(records, sid, z)) for z in self.design)

    @staticmethod
    def _shown(records: dict, sid: str, subset: Subset):
        return [records[sid][t] for t in subset] if subset else None

    def complete(self, sid: str) -> bool:
        return all(z in self.answers[sid] for z in self.design)

    @property
    def items(self) -> list[str]:
        """The queries whose whole design was answered, in id order: what trains."""
        return [sid for sid in sorted(self.samples) if self.complete(sid)]

    def add(self, sid: str, subset: Subset, text: str | None, scores=None) -> None:
        """An answer asked during training (a draw outside the design)."""
        self.answers[sid][tuple(subset)] = (text, scores)
        self._version += 1

    # -- reading -----------------------------------------------------------------------------------
    def answer(self, sid: str, subset: Subset) -> str | None:
        """The reasoner's answer when it was asked, else the surrogate's."""
        got = self.answers[sid].get(tuple(subset))
        return got[0] if got is not None else self.surrogate(sid, tuple(subset))

    def asked(self, sid: str, subset: Subset) -> bool:
        return tuple(subset) in self.answers[sid]

    def surrogate(self, sid: str, subset: Subset, exclude: Subset | None = None) -> str | None:
        """The answer predicted for ``subset`` from the asked ones (``exclude``: an asked subset to
        predict without, for :meth:`surrogate_fidelity`)."""
        sample = self.samples[sid]
        asked = self.answers[sid]
        if exclude is not None:
            asked = {z: v for z, v in asked.items() if z != exclude}
        scores = self._additive_scores(asked, subset)
        if scores is not None and len(scores) == len(sample.choices):
            return sample.choices[int(np.argmax(scores))]
        if not asked:
            return None
        want = set(subset)
        nearest = min(asked, key=lambda z: (len(want ^ set(z)), len(z)))
        return asked[nearest][0]

    def _additive_scores(self, asked: dict, subset: Subset) -> np.ndarray | None:
        """Choice scores of ``subset`` as the nearer anchor's plus each differing tool's effect, or None
        when the needed answers or their scores are missing."""
        tools = self.tool_ids
        chosen = set(subset)

        def score(z):
            got = asked.get(tuple(t for t in tools if t in z))
            return None if got is None or got[1] is None else np.asarray(got[1], dtype=float)

        anchors = [(set(), lambda t: {t}), (set(tools), lambda t: set(tools) - {t})]
        anchors.sort(key=lambda a: len(a[0] ^ chosen))  # the nearer anchor first
        for base, step in anchors:
            origin = score(base)
            if origin is None:
                continue
            total, ok = origin.copy(), True
            for t in base ^ chosen:
                moved = score(step(t))
                if moved is None:
                    ok = False
                    break
                total += moved - origin
            if ok:
                return total
        return None

    def rewards(self, sids: list[str], kind: str, tool_cost: float, signal: str = "binary") -> np.ndarray:
        """``[N, 2^T]``: each query's reward under every subset (:func:`every_subset`), from the asked or
        predicted answers: 1[right] (− 1[right with no tool] for the differential kind) − price × tools;
        with ``signal`` confidence, p(right) from the choice scores in place of 1[right].  The answers'
        correctness is computed once per table state."""
        subsets = every_subset(self.tool_ids)
        memo = getattr(self, "_correct", None)
        if memo is None or memo[0] != (self._version, signal):
            memo = (self._version, signal), {}
            self._correct = memo
        missing = [sid for sid in sids if sid not in memo[1]]
        if missing:
            matrix = self.confidence_matrix if signal == "confidence" else self.correct_matrix
            memo[1].update(zip(missing, matrix(missing, subsets)))
        correct = np.stack([memo[1][sid] for sid in sids]) if sids else np.zeros((0, len(subsets)))
        if kind == "differential":
            correct = correct - correct[:, :1]  # the first subset is the empty one: y_base
        sizes = np.array([len(z) for z in subsets], dtype=float)
        return correct - tool_cost * sizes[None, :]

    def asked_mask(self, sids: list[str]) -> np.ndarray:
        """``[N, 2^T]`` 1.0 where the reasoner was asked query ``sids[i]`` under subset ``j``."""
        subsets = every_subset(self.tool_ids)
        return np.array([[float(z in self.answers[sid]) for z in subsets] for sid in sids])

    def correct_matrix(self, sids: list[str], subsets: list[Subset]) -> np.ndarray:
        """``[N, S]`` 1.0 where the (asked or predicted) answer of query ``sids[i]`` under ``subsets[j]``
        is right."""
        return np.array([[float(is_correct(self.samples[sid], self.answer(sid, z))) for z in subsets] for sid in sids])

    def confidence_matrix(self, sids: list[str], subsets: list[Subset]) -> np.ndarray:
        """``[N, S]`` the reasoner's probability of the right choice (softmax of the asked or surrogate
        choice scores, summed over the choices that count as right); 1[right] where no scores exist."""
        out = np.zeros((len(sids), len(subsets)))
        for i, sid in enumerate(sids):
            sample = self.samples[sid]
            right = np.array([float(is_correct(sample, c)) for c in sample.choices])
            for j, z in enumerate(subsets):
                got = self.answers[sid].get(tuple(z))
                scores = (
                    np.asarray(got[1], dtype=float)
                    if got is not None and got[1] is not None
                    else (None if got is not None else self._additive_scores(self.answers[sid], tuple(z)))
                )
                if (
                    scores is None
                    or len(scores) != len(right)
                    or np.isnan(scores).any()
                    or not np.isfinite(scores).any()
                ):
                    out[i, j] = float(is_correct(sample, self.answer(sid, z)))
                    continue
                p = np.exp(scores - np.max(scores))
                out[i, j] = float((p / p.sum()) @ right)
        return out

    def surrogate_fidelity(self) -> dict:
        """How often the surrogate gives the reasoner's own answer, for each asked subset of more than
        none predicted without it (all tools from the singles, each single from the others, ...)."""
        hits, total = {}, {}
        for sid, z, text in [(sid, z, v[0]) for sid, rows in self.answers.items() for z, v in rows.items()]:
            if not z:
                continue
            kind = "all" if len(z) == len(self.tool_ids) else ("single" if len(z) == 1 else "other")
            total[kind] = total.get(kind, 0) + 1
            hits[kind] = hits.get(kind, 0) + (self.surrogate(sid, z, exclude=z) == text)
        return {k: {"agree": round(hits[k] / total[k], 4), "n": total[k]} for k in sorted(total)}

"""Where the router's trainer gets the reasoner's answers: asked for every new (query, subset) it draws, as
the paper's Algorithm 1 does, or read from an answer table (:mod:`.table`) filled before training.

One object holds what the answers cost (:class:`TrainCounters`), the no-tool answers ``y_base`` and the
answers already given, so the trainer's step reads sample → answers → reward → advantage → update and
does not know which source it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...data.sample import Sample
from .table import ask_within


@dataclass
class TrainCounters:
    """What the run actually asked for, against what Algorithm 1 done naively would ask."""

    reasoner_calls: int = 0
    naive_reasoner_calls: int = 0
    naive_tool_runs: int = 0
    steps: int = 0
    subset_memo: dict = field(default_factory=dict)
    """(query id, subset) -> the reasoner's answer, for the answers asked during training (no table)."""


class AnswerSource:
    """The reasoner's answers for training queries under tool subsets.

    ``table``: an :class:`~.table.AnswerTable` to read answers from (None: the reasoner is asked every new
    draw), ``budget`` the :class:`~.table.Budget` of new answers, ``outside`` what a draw outside the table
    gets (``ask`` while the budget lasts, else the table's surrogate) and ``unasked`` whether the exact
    objective reads the surrogate's rewards (``surrogate``) or only the asked subsets' (``excluded``);
    ``signal`` what the table's rewards read of an answer."""

    def __init__(
        self,
        reasoner,
        records: dict[str, dict],
        tool_ids,
        table=None,
        budget=None,
        outside: str = "surrogate",
        unasked: str = "surrogate",
        signal: str = "binary",
    ):
        self.reasoner, self.records, self.tool_ids = reasoner, records, tuple(tool_ids)
        self.table, self.budget, self.outside, self.unasked = table, budget, outside, unasked
        self.signal = signal
        """What the table's rewards read of an answer (``reward.signal``): right or wrong, or the reasoner's
        confidence in the right choice."""
        self.counters = TrainCounters()
        self.base_predictions: dict[str, str | None] = {}
        self._expected: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def baseline(self, samples: list[Sample]) -> None:
        """y_base for every training query, once per run (and across runs, via the answer cache)."""
        todo = [s for s in samples if s.id not in self.base_predictions]
        if todo and self.table is not None:
            self.base_predictions.update({s.id: self.table.answer(s.id, ()) for s in todo})
        elif todo:
            replies = self.reasoner.answer_many([(s, None) for s in todo])
            self.base_predictions.update({s.id: r for s, r in zip(todo, replies)})
            self.counters.reasoner_calls += len(todo)
            self.reasoner.check_health()

    def answers_for(self, batch: list[Sample], subsets: list[list[tuple[str, ...]]]) -> list[list[str | None]]:
        """ŷ for each (query, subset); only never-seen (query, subset) pairs reach the reasoner."""
        if self.table is not None:
            return self._from_table(batch, subsets)
        memo = self.counters.subset_memo
        missing = {}
        for sample, group in zip(batch, subsets):
            for subset in group:
                key = (sample.id, subset)
                if subset and key not in memo and key not in missing:
                    missing[key] = (sample, [self.records[sample.id][t] for t in subset])
        if missing:
            replies = self.reasoner.answer_many(list(missing.values()))
            memo.update(zip(missing, replies))
            self.counters.reasoner_calls += len(missing)
            self.reasoner.check_health()
        return [
            [memo[(s.id, z)] if z else self.base_predictions[s.id] for z in group] for s, group in zip(batch, subsets)
        ]

    def _from_table(self, batch: list[Sample], subsets) -> list[list[str | None]]:
        """ŷ from the answer table; a draw outside it is asked (``outside: ask``, while the budget
        lasts, and kept in the table) or answered by the table's surrogate."""
        table = self.table
        if self.outside == "ask" and self.budget is not None and not self.budget.exhausted:
            wanted = {(s.id, z): s for s, group in zip(batch, subsets) for z in group if not table.asked(s.id, z)}
            if wanted:
                requests = [(s, [self.records[s.id][t] for t in z]) for (_, z), s in wanted.items()]
                for (sid, z), reply in zip(wanted, ask_within(self.reasoner, requests, self.budget)):
                    if reply is not None and reply.error is None:
                        table.add(sid, z, reply.text, reply.scores)
                self.counters.reasoner_calls = self.budget.spent
        return [[table.answer(s.id, z) for z in group] for s, group in zip(batch, subsets)]

    def expected_rewards(
        self, samples: list[Sample], reward_kind: str, tool_cost: float
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[N, 2^T]``: each training query's reward under every subset, from the answer table (the
        reasoner's answers where asked, the surrogate's elsewhere), tool price included; and with
        ``unasked: excluded`` the ``[N, 2^T]`` mask of the asked subsets (else None).  Computed once."""
        if self.table is None:
            raise ValueError(
                "policy.router.objective expected reads every subset's reward from an answer table: "
                "policy.router.table.enabled"
            )
        if self._expected is None:
            ids = [s.id for s in samples]
            rewards = self.table.rewards(ids, reward_kind, tool_cost, self.signal)
            rewards = torch.tensor(rewards, dtype=torch.float32)
            mask = None
            if self.unasked == "excluded":
                mask = torch.tensor(self.table.asked_mask(ids), dtype=torch.float32)
            self._expected = (rewards, mask)
        return self._expected

    def state(self) -> dict:
        """What a checkpoint keeps: y_base, the answers asked during training, the counters."""
        c = self.counters
        return {
            "base_predictions": self.base_predictions,
            "subset_memo": [[sid, list(z), reply] for (sid, z), reply in c.subset_memo.items()],
            "counters": {
                "reasoner_calls": c.reasoner_calls,
                "naive_reasoner_calls": c.naive_reasoner_calls,
                "naive_tool_runs": c.naive_tool_runs,
                "steps": c.steps,
            },
        }

    def load_state(self, state: dict) -> None:
        self.base_predictions = state["base_predictions"]
        self.counters.subset_memo = {(sid, tuple(z)): reply for sid, z, reply in state["subset_memo"]}
        for key, value in state["counters"].items():
            setattr(self.counters, key, value)

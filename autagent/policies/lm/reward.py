"""The LM policy's reward function, in TRL's signature: parse each completion, run the selected
tools (cache first), ask the frozen reasoner, and score with the run's reward (differential or
binary); a completion that does not parse gets ``invalid_reward`` and is counted."""

from __future__ import annotations

import time

from rewards import get_reward

from .prompt import parse_selection


class ToolSelectionReward:
    def __init__(
        self,
        samples_by_id: dict,
        pool,
        reasoner,
        kind: str,
        tool_cost: float,
        invalid_reward: float,
        tool_ids,
        prefix: str = "",
    ):
        self.samples, self.pool, self.reasoner = samples_by_id, pool, reasoner
        self.prefix = prefix
        """Put in front of each completion before parsing (a text policy's reply prefix, ``<answer>``)."""
        self.seconds = 0.0
        """Time spent in this reward (tools from the cache, the reasoner, scoring): the step's reward share."""
        self.tool_ids = tuple(tool_ids)
        self.score = get_reward(kind, tool_cost)
        self.__name__ = f"{kind}_tool_reward"
        self.invalid_reward = invalid_reward
        self.invalid_reasons: dict[str, int] = {}
        self.batches = 0
        """Calls made (one per generation batch): the steps this process actually ran."""

    def __call__(self, prompts, completions, sample_id, base_prediction, log_metric=None, **_) -> list[float]:
        """``log_metric`` is TRL's: values logged through it are averaged over every rank."""
        started = time.perf_counter()
        try:
            return self.score_batch(prompts, completions, sample_id, base_prediction, log_metric)
        finally:
            self.seconds += time.perf_counter() - started

    def score_batch(self, prompts, completions, sample_id, base_prediction, log_metric) -> list[float]:
        self.batches += 1
        texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
        selections = [parse_selection(self.prefix + t, self.tool_ids) for t in texts]
        samples = [self.samples[i] for i in sample_id]
        requests = [
            (s, list(self.pool.run(s.audio, z.tools).values()) if z.tools else None)
            for s, z in zip(samples, selections)
        ]
        failures_before = self.reasoner.failures
        predictions = self.reasoner.answer_many(requests)
        self.reasoner.check_health()
        rewards = self.score(
            prompts,
            completions,
            predictions=predictions,
            base_predictions=list(base_prediction),
            answer=[s.answer for s in samples],
            choices=[s.choices for s in samples],
            num_tools=[len(z.tools) for z in selections],
        )
        for i, selection in enumerate(selections):
            if not selection.valid:
                rewards[i] = self.invalid_reward
                reason = selection.reason.split(":")[0]
                self.invalid_reasons[reason] = self.invalid_reasons.get(reason, 0) + 1
        if log_metric is not None:
            log_metric("selection/invalid_share", sum(not z.valid for z in selections) / len(selections))
            log_metric("selection/avg_tools", sum(len(z.tools) for z in selections) / len(selections))
            log_metric("reasoner/failures", float(self.reasoner.failures - failures_before))
        return rewards

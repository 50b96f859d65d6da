"""The LM policy's reward function, in TRL's signature: parse each completion, run the selected
tools (cache first), ask the frozen reasoner, and score with the run's reward (differential or
binary); a completion that does not parse gets ``invalid_reward`` and is counted."""
from __future__ import annotations

from .prompt import parse_selection


class ToolSelectionReward:
    def __init__(self, samples_by_id: dict, pool, reasoner, kind: str, tool_cost: float, invalid_reward: float, tool_ids):
        from rewards import get_reward

        self.samples, self.pool, self.reasoner = samples_by_id, pool, reasoner
        self.tool_ids = tuple(tool_ids)
        self.score = get_reward(kind, tool_cost)
        self.__name__ = f"{kind}_tool_reward"
        self.invalid_reward = invalid_reward
        self.invalid_reasons: dict[str, int] = {}
        self.metrics: dict | None = None  # the trainer's metric lists (TRL averages them into each log line)

    def __call__(self, prompts, completions, sample_id, base_prediction, **_) -> list[float]:
        selections = [parse_selection(c if isinstance(c, str) else c[0]["content"], self.tool_ids) for c in completions]
        samples = [self.samples[i] for i in sample_id]
        requests = [(s, list(self.pool.run(s.audio, z.tools).values()) if z.tools else None) for s, z in zip(samples, selections)]
        predictions = self.reasoner.answer_many(requests)
        rewards = self.score(prompts, completions, predictions=predictions, base_predictions=list(base_prediction),
                             answer=[s.answer for s in samples], choices=[s.choices for s in samples],
                             num_tools=[len(z.tools) for z in selections])
        for i, selection in enumerate(selections):
            if not selection.valid:
                rewards[i] = self.invalid_reward
                reason = selection.reason.split(":")[0]
                self.invalid_reasons[reason] = self.invalid_reasons.get(reason, 0) + 1
        if self.metrics is not None:
            self.metrics["selection/invalid_share"].append(sum(not z.valid for z in selections) / len(selections))
            self.metrics["selection/avg_tools"].append(sum(len(z.tools) for z in selections) / len(selections))
        return rewards

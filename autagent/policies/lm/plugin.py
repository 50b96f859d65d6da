"""The LM policy as a plugin: an HF model folder (safetensors) plus the shared manifest."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from .config import LMPolicyConfig
from .prompt import AGENT_PROMPT, agent_prompt, parse_selection, tool_list


def export_lm(directory: Path, model, processor, lm: LMPolicyConfig, tool_ids, tools_profile: str, tool_settings,
              max_seconds, training_config: dict, metrics: dict | None = None) -> Path:
    from ...plugin import export_plugin

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        processor.save_pretrained(tmp)

    return export_plugin(directory, "lm", write, tool_ids, tools_profile, tool_settings, max_seconds, {
        "encoders": {"policy": "qwen2-audio (in this folder)"}, "prompt": AGENT_PROMPT, "tool_list": tool_list(tool_ids),
        "policy_config": dataclasses.asdict(lm), "training_config": training_config, "metrics": metrics or {}})


class LMPlugin:
    """A loaded LM plugin: the model hears the clip and writes its tool choice."""

    def __init__(self, directory: Path, manifest: dict):
        from transformers import AutoProcessor, Qwen2AudioForConditionalGeneration

        self.directory, self.manifest = directory, manifest
        self.config = LMPolicyConfig(**manifest["policy_config"])
        self.processor = AutoProcessor.from_pretrained(directory)
        self.model = Qwen2AudioForConditionalGeneration.from_pretrained(directory).eval()
        self.invalid = 0

    @property
    def tools(self) -> list[str]:
        return [t["id"] for t in self.manifest["tools"]]

    def select_many(self, samples) -> list[tuple[str, ...]]:
        return [tuple(self.select(s.audio, s.question)) for s in samples]

    def select(self, audio: str, question: str, choices=()) -> list[str]:
        """Greedy tool choice; an unreadable clip or an unparseable completion selects no tool (counted in ``invalid``)."""
        from tools.audio import AudioError

        from .rollout import encode_prompts, generate_selections

        try:
            inputs = encode_prompts(self.processor, [agent_prompt(question, self.tools)], [str(audio)],
                                    self.config.audio_max_seconds)
        except AudioError:
            self.invalid += 1
            return []
        (ids,) = generate_selections(self.model, self.processor, inputs, self.config, len(self.tools), do_sample=False)
        selection = parse_selection(self.processor.tokenizer.decode(ids, skip_special_tokens=True), self.tools)
        self.invalid += not selection.valid
        return list(selection.tools)

"""The LM policy as a plugin: an HF model folder (safetensors) plus the shared manifest.  A LoRA-trained
policy exports its adapter (``policy.lm.lora.export: adapter``; loading reads the base from
``model_id``) or the adapter folded into the base's weights (``merged``: a self-contained folder)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ...data.sample import Sample
from ...plugin.manifest import export_plugin
from ...plugin.trust import PluginError
from .config import LMPolicyConfig
from .prompt import AGENT_PROMPT, agent_prompt, parse_selection, tool_list
from .rollout import encode_prompts, generate_selections


def export_lm(
    directory: Path,
    model,
    processor,
    lm: LMPolicyConfig,
    tool_ids,
    tools_profile: str,
    tool_settings,
    max_seconds,
    training_config: dict,
    metrics: dict | None = None,
) -> Path:
    def write(tmp: Path) -> None:
        if lm.lora is not None and lm.lora.export == "merged":
            base = model.get_base_model()
            base.save_pretrained(tmp, state_dict=merged_state_dict(model), safe_serialization=True)
        else:  # a full model, or the adapter alone (a PeftModel saves its adapter)
            model.save_pretrained(tmp, safe_serialization=True)
        processor.save_pretrained(tmp)

    return export_plugin(
        directory,
        "lm",
        write,
        tool_ids,
        tools_profile,
        tool_settings,
        max_seconds,
        {
            "encoders": {
                "policy": f"qwen2-audio {lm.model_id} + LoRA adapter (in this folder)"
                if lm.lora is not None and lm.lora.export == "adapter"
                else "qwen2-audio (in this folder)"
            },
            "prompt": AGENT_PROMPT,
            "tool_list": tool_list(tool_ids),
            "policy_config": dataclasses.asdict(lm),
            "training_config": training_config,
            "metrics": metrics or {},
        },
    )


def merged_state_dict(model) -> dict:
    """The base model's weights with each LoRA adapter folded in (W + B A x alpha / r, summed in fp32 and
    stored in the base's dtype), under the plain model's names; the model in memory is left unchanged."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    state = {}
    for name, tensor in base.state_dict().items():
        if "lora_" not in name:
            state[name.replace(".base_layer.", ".")] = tensor
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer) and module.active_adapters:
            weight = module.get_base_layer().weight
            delta = sum(module.get_delta_weight(a).float() for a in module.active_adapters)
            state[f"{name}.weight"] = (weight.float() + delta).to(weight.dtype)
    return state


def load_policy_model(directory: Path, config: LMPolicyConfig, dtype):
    """The exported policy: a full model folder, or (``lora.export: adapter``) the base named by
    ``model_id`` with the adapter in ``directory``."""
    from transformers import Qwen2AudioForConditionalGeneration

    if config.lora is None or config.lora.export == "merged":
        return Qwen2AudioForConditionalGeneration.from_pretrained(directory, dtype=dtype)
    from peft import PeftModel

    try:
        base = Qwen2AudioForConditionalGeneration.from_pretrained(config.model_id, dtype=dtype)
    except OSError as err:
        raise PluginError(
            f"{directory}: this plugin holds a LoRA adapter over {config.model_id}, which cannot be loaded here "
            f"({err}); export it with policy.lm.lora.export: merged for a self-contained plugin"
        ) from None
    return PeftModel.from_pretrained(base, directory)


class LMPlugin:
    """A loaded LM plugin: the model hears the clip and writes its tool choice.

    Loaded from a folder, it runs on ``policy.lm.device`` (or CUDA when present, else the CPU), in
    bfloat16 on a GPU when the policy trained in it; :meth:`from_model` wraps a model already in
    memory (evaluation right after training).  Queries are answered in batches of
    ``policy.lm.eval_batch_size``, greedily."""

    def __init__(self, directory: Path, manifest: dict, model=None, processor=None, device: str | None = None):
        import torch

        self.directory, self.manifest = Path(directory), manifest
        self.config = LMPolicyConfig(**manifest["policy_config"])
        if model is None:
            from transformers import AutoProcessor

            device = device or self.config.device or ("cuda" if torch.cuda.is_available() else "cpu")
            dtype = torch.bfloat16 if self.config.bf16 and str(device).startswith("cuda") else torch.float32
            processor = AutoProcessor.from_pretrained(directory)
            model = load_policy_model(directory, self.config, dtype).to(device)
        if model.is_activation_checkpointing:
            model.activation_checkpointing_disable()  # training is over; generation needs its KV cache
        self.model, self.processor = model.eval(), processor
        self.device = next(model.parameters()).device
        self.invalid = 0

    @classmethod
    def from_model(cls, directory: Path, manifest: dict, model, processor) -> LMPlugin:
        return cls(directory, manifest, model=model, processor=processor)

    @property
    def tools(self) -> list[str]:
        return [t["id"] for t in self.manifest["tools"]]

    def select_many(self, samples) -> list[tuple[str, ...]]:
        """Greedy tool choices in batches; an unreadable clip or an unparseable completion selects no
        tool (counted in ``invalid``)."""
        import torch

        # looked up when called, not at import: a test patches it on its module
        from tools.audio import AudioError, load_audio

        chosen: list[tuple[str, ...]] = [()] * len(samples)
        readable = []
        for i, sample in enumerate(samples):
            try:
                load_audio(sample.audio, self.processor.feature_extractor.sampling_rate, self.config.audio_max_seconds)
                readable.append(i)
            except AudioError:
                self.invalid += 1
        size = self.config.eval_batch_size
        for start in range(0, len(readable), size):
            rows = readable[start : start + size]
            inputs = encode_prompts(
                self.processor,
                [agent_prompt(samples[i].question, self.tools) for i in rows],
                [str(samples[i].audio) for i in rows],
                self.config.audio_max_seconds,
            ).to(self.device)
            # A model trained with fp32 masters selects in bf16, as a plugin loaded on a GPU does.
            in_bf16 = self.config.bf16 and self.device.type == "cuda"
            with torch.autocast(self.device.type, torch.bfloat16, enabled=in_bf16):
                completions = generate_selections(
                    self.model, self.processor, inputs, self.config, len(self.tools), do_sample=False
                )
            for i, ids in zip(rows, completions):
                selection = parse_selection(self.processor.tokenizer.decode(ids, skip_special_tokens=True), self.tools)
                self.invalid += not selection.valid
                chosen[i] = selection.tools
        return chosen

    def select(self, audio: str, question: str, choices=()) -> list[str]:
        query = Sample(id="query", audio=str(audio), question=question, choices=tuple(choices), answer="")
        return list(self.select_many([query])[0])


def check_encoders(manifest: dict) -> None:
    """The LM plugin carries its own encoders (the model folder): nothing installed to compare."""


def open_plugin(directory: Path, manifest: dict, extra_tools=()) -> LMPlugin:
    if extra_tools:
        raise PluginError(
            f"{directory}: an LM plugin selects among the tools it trained with; it cannot add {list(extra_tools)}"
        )
    return LMPlugin(directory, manifest)

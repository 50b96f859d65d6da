"""scripts/lm_policy_probe.py: the text LM policy's greedy choices on a split's first items, the base model and
a LoRA checkpoint (issue 65's recipe choices on training items)."""

from __future__ import annotations

import dataclasses
import json

from helpers.scripts import load_script


def test_the_probe_reports_the_plugins_own_greedy_choices_for_the_base_and_a_checkpoint(tiny_bench, tmp_path, capsys):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from autagent.policies.lm.config import LMPolicyConfig
    from autagent.policies.lm.plugin import LMPlugin
    from autagent.policies.lm.recipe import build_tiny_text_policy
    from autagent.policies.lm.text import load_tokenizer

    probe = load_script("lm_policy_probe")
    model_dir = build_tiny_text_policy(tmp_path / "model")
    torch.manual_seed(3)
    adapted = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir),
        LoraConfig(r=4, target_modules=["v_proj", "o_proj", "down_proj"]),
    )
    for name, weight in adapted.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(weight, std=2.0)  # an adapter that changes the logits
    adapted.save_pretrained(tmp_path / "checkpoint-1")

    probe.main(["--model", str(model_dir), "--data", str(tiny_bench["paths"]["train"]), "--items", "6"])
    probe.main(
        [
            "--model",
            str(model_dir),
            "--data",
            str(tiny_bench["paths"]["train"]),
            "--items",
            "6",
            str(tmp_path / "checkpoint-1"),
        ]
    )
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["model"] for x in lines] == ["base", "base", str(tmp_path / "checkpoint-1")]
    for line in lines:
        assert line["items"] == 6 == sum(line["choices"].values())
        assert sum(sum(c.values()) for c in line["by_category"].values()) == 6
    assert lines[2]["choices"] != lines[0]["choices"]  # the checkpoint's adapter is applied

    # the base's choices are the ones its plugin makes (the same prompt, grammar and greedy decoding)
    config = LMPolicyConfig(
        modality="text", model_id=str(model_dir), constrained_decoding=True, max_completion_length=8
    )
    manifest = {"policy_config": dataclasses.asdict(config), "tools": [{"id": t} for t in probe.TOOLS]}
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    plugin = LMPlugin.from_model(tmp_path, manifest, model, load_tokenizer(str(model_dir)))
    selected = plugin.select_many(tiny_bench["train"][:6])
    from collections import Counter

    assert Counter("+".join(s) or "none" for s in selected) == Counter(lines[0]["choices"])

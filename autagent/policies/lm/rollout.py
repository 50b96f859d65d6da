"""Audio in and out of generation, and log-probabilities under the answer grammar.

TRL has no audio path: prompts are encoded here with the real Qwen2-Audio processor (chat template,
audio features, left padding) and completions are sampled with the features; with constrained
decoding, :func:`masked_logps` scores completions under the very mask sampling applied.
"""

from __future__ import annotations

from contextlib import contextmanager

from tools.audio import load_audio

from .config import LMPolicyConfig
from .decoding import decoder_view, prompt_embeddings, static_cache_kwargs, under_autocast
from .merged import merged_adapters
from .prompt import AnswerGrammar


def encode_prompts(processor, texts: list[str], audio_paths: list[str], max_seconds: float):
    """Chat-templated prompts with the clip, through the real Qwen2-Audio processor (left-padded)."""
    sr = processor.feature_extractor.sampling_rate
    processor.tokenizer.padding_side = "left"  # batched generation continues every row from its last prompt token
    chats = [
        processor.apply_chat_template(
            [{"role": "user", "content": [{"type": "audio", "audio_url": path}, {"type": "text", "text": text}]}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for text, path in zip(texts, audio_paths)
    ]
    audios = [load_audio(path, sr, max_seconds).samples for path in audio_paths]
    return processor(text=chats, audio=audios, sampling_rate=sr, return_tensors="pt", padding=True)


def generate_selections(
    model, processor, inputs, config: LMPolicyConfig, num_tools: int, do_sample: bool, temperature: float = 1.0
):
    """Completion token ids (a list per row, EOS kept, padding dropped) for already-encoded prompts.

    ``rollout.prompt_logits: last`` generates with the decoder alone from the merged prompt embeddings
    (:mod:`.decoding`: logits at the last prompt position only, optionally a static KV cache);
    ``all`` calls Qwen2-Audio's own ``generate`` (logits at every prompt position).  Both sample from
    the same distribution with the same random draws; under ``bf16`` both compute in bf16."""
    import torch

    tokenizer = processor.tokenizer
    # A sampled <|AUDIO|> would no longer match the clip's features in the log-probability pass.
    audio_tokens = [processor.audio_token, processor.audio_bos_token, processor.audio_eos_token]
    kwargs = dict(
        max_new_tokens=config.max_completion_length,
        do_sample=do_sample,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        suppress_tokens=tokenizer.convert_tokens_to_ids(audio_tokens),
    )
    if do_sample:
        kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
    prompt_length = inputs["input_ids"].shape[1]
    device = inputs["input_ids"].device
    in_bf16 = under_autocast(config, model)
    with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, enabled=in_bf16):
        if config.rollout.prompt_logits == "last":
            # from embeddings, ``generate`` returns (and the grammar reads) the new tokens only
            if config.constrained_decoding:
                kwargs["prefix_allowed_tokens_fn"] = AnswerGrammar(tokenizer, 0, num_tools)
            embeds = prompt_embeddings(model, inputs)
            kwargs.update(static_cache_kwargs(config, prompt_length, autocast=in_bf16))
            new = decoder_view(model).generate(inputs_embeds=embeds, attention_mask=inputs["attention_mask"], **kwargs)
        else:
            if config.constrained_decoding:
                kwargs["prefix_allowed_tokens_fn"] = AnswerGrammar(tokenizer, prompt_length, num_tools)
            new = model.generate(**inputs, **kwargs)[:, prompt_length:]
    return [completion_ids(row, tokenizer.eos_token_id) for row in new.tolist()]


def completion_ids(row: list[int], eos: int) -> list[int]:
    """A generated row up to and including its first EOS (``generate`` pads a row only after its EOS, so
    a sampled padding token before it is part of the completion)."""
    return row[: row.index(eos) + 1] if eos in row else row


def grammar_allowed(grammar: AnswerGrammar, completions: list[list[int]], length: int):
    """``([rows, length, K] token ids, [rows, length, K] valid)``: the tokens the grammar allowed at each
    completion position (K = the most at any position; positions past a row's end allow only EOS)."""
    import torch

    allowed = [
        [grammar.allowed(ids[:j]) if j < len(ids) else [grammar.eos] for j in range(length)] for ids in completions
    ]
    width = max((len(a) for row in allowed for a in row), default=1)
    index = torch.zeros(len(completions), length, width, dtype=torch.long)
    valid = torch.zeros(len(completions), length, width, dtype=torch.bool)
    for r, row in enumerate(allowed):
        for j, tokens in enumerate(row):
            index[r, j, : len(tokens)] = torch.tensor(tokens)
            valid[r, j, : len(tokens)] = True
    return index, valid


def masked_logps(logits, completion_ids, index, valid, temperature: float):
    """Per-token log π(token) and entropy under the grammar: the softmax over the allowed tokens only,
    which is the distribution sampling drew from (a disallowed token gets -inf)."""
    import torch

    scaled = logits.float() / temperature
    allowed = scaled.gather(-1, index.to(logits.device)).masked_fill(~valid.to(logits.device), float("-inf"))
    log_z = torch.logsumexp(allowed, dim=-1)
    is_allowed = ((index.to(logits.device) == completion_ids.unsqueeze(-1)) & valid.to(logits.device)).any(-1)
    token_logp = torch.where(
        is_allowed,
        scaled.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1) - log_z,
        torch.full_like(log_z, float("-inf")),
    )
    logp = allowed - log_z.unsqueeze(-1)
    entropy = -(logp.exp() * logp.masked_fill(~valid.to(logits.device), 0.0)).sum(-1)
    return token_logp, entropy


def completion_logprob(
    model,
    processor,
    question_prompt: str,
    audio: str,
    completion: str,
    max_seconds: float = 30.0,
    grammar: AnswerGrammar | None = None,
) -> float:
    """log π(completion | clip, prompt) under ``model``, teacher-forced, EOS included; under ``grammar``
    when given (the distribution constrained decoding samples from).  Every tensor (the prompt, the
    clip's features, the target ids and the grammar's index) is put on the model's device."""
    import torch

    device = next(model.parameters()).device
    inputs = encode_prompts(processor, [question_prompt], [audio], max_seconds).to(device)
    target = processor.tokenizer(completion, add_special_tokens=False)["input_ids"] + [processor.tokenizer.eos_token_id]
    target_ids = torch.tensor([target], device=device)
    ids = torch.cat([inputs["input_ids"], target_ids], dim=1)
    with torch.no_grad():
        logits = model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            input_features=inputs["input_features"],
            feature_attention_mask=inputs["feature_attention_mask"],
        ).logits
    logits = logits[:, -len(target) - 1 : -1].float()
    if grammar is not None:
        index, valid = grammar_allowed(grammar, [target], len(target))
        return float(masked_logps(logits, target_ids, index, valid, 1.0)[0].sum())
    logp = torch.log_softmax(logits, dim=-1)
    return float(logp.gather(-1, target_ids.unsqueeze(-1)).sum())


@contextmanager
def generation_mode(trainer, merge_adapters: bool = False):
    """The policy as generation needs it, whatever state the trainer left it in: unwrapped (DDP,
    DeepSpeed; ZeRO-3 parameters gathered), gradient checkpointing off, eval mode, no input-embedding
    hooks and, with ``merge_adapters``, LoRA's adapters merged into the weights (:mod:`.merged`), all
    restored after.

    Under gradient checkpointing the decoder layers drop their KV cache in train mode, yet
    ``generate`` still feeds only the last token, so every token after the first would be sampled
    without the prompt or the clip.  TRL's own generation path goes through the same context.
    LoRA under checkpointing adds a forward hook that marks the input embeddings as requiring grad
    (``enable_input_require_grads``); under ``no_grad`` it does nothing, but dynamo cannot trace it and
    gave up compiling the decoding step (on an H100 the 8.40 B LoRA rollout decoded at 20 ms a step)."""
    from trl.models import unwrap_model_for_generation

    with unwrap_model_for_generation(
        trainer.model_wrapped,
        trainer.accelerator,
        gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
    ) as model:
        was_training = model.training
        hooks = input_grad_hooks(model)
        for module, key, _ in hooks:
            del module._forward_hooks[key]
        model.eval()
        try:
            with merged_adapters(model, merge_adapters):
                yield model
        finally:
            model.train(was_training)
            for module, key, hook in hooks:
                module._forward_hooks[key] = hook


def input_grad_hooks(model) -> list:
    """``(module, key, hook)`` of the forward hooks that mark the input embeddings' output as requiring
    grad: transformers' ``make_inputs_require_grads`` and peft's ``make_inputs_require_grad``.  Found by
    name on every module, since transformers tracks only the last call's (each re-enabling of gradient
    checkpointing after a generation registers them again)."""
    return [
        (module, key, hook)
        for module in model.modules()
        for key, hook in list(module._forward_hooks.items())
        if getattr(hook, "__name__", "").startswith("make_inputs_require_grad")
    ]


def make_rollout(processor, config: LMPolicyConfig, num_tools: int):
    """TRL ``rollout_func``: encode prompt + clip, sample one completion per row in chunks of at most
    ``generation_batch_size`` rows, stash the features for the log-probability passes."""

    def rollout(prompts: list[str], trainer) -> dict:
        import torch

        prompt_ids, completions, features, feature_masks = [], [], [], []
        size = config.generation_batch_size
        with generation_mode(trainer, config.rollout.merge_adapters) as model:
            for start in range(0, len(prompts), size):
                inputs = encode_prompts(
                    processor,
                    prompts[start : start + size],
                    trainer._audio_paths[start : start + size],
                    config.audio_max_seconds,
                ).to(trainer.accelerator.device)
                completions += generate_selections(
                    model, processor, inputs, config, num_tools, do_sample=True, temperature=trainer.temperature
                )
                mask = inputs["attention_mask"].bool()
                prompt_ids += [row[m].tolist() for row, m in zip(inputs["input_ids"], mask)]
                features.append(inputs["input_features"])
                feature_masks.append(inputs["feature_attention_mask"])
        trainer._audio = (torch.cat(features), torch.cat(feature_masks))
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None}

    return rollout

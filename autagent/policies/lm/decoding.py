"""The rollout's fast route (``policy.lm.rollout.prompt_logits: last``): the clip's embeddings merged into
the prompt once, then the decoder generates from them on its own.

Qwen2-Audio's ``generate`` cannot keep only the last position's logits (its forward has no
``logits_to_keep``), so its prefill computes logits over the 156k-token vocabulary at every prompt
position (8 rows x 1,520 tokens: 3.8 GB in bf16, and accelerate's autocast wrapper adds an fp32 copy),
of which sampling reads one position.  Here :func:`prompt_embeddings` takes the merged embeddings
from Qwen2-Audio's own forward (captured at its language model's input, which is not run), and
:func:`decoder_view` is a ``Qwen2ForCausalLM`` that shares the policy's decoder and LM head (no copy;
LoRA adapters included) and generates from ``inputs_embeds`` with ``logits_to_keep``, a static KV
cache and, on CUDA, transformers' compiled decoding step.
"""

from __future__ import annotations

VIEW = "_autagent_decoder_view"


class _Captured(Exception):
    """Stops Qwen2-Audio's forward once its language model's input is known."""


def audio_model(model):
    """The ``Qwen2AudioForConditionalGeneration`` inside ``model`` (a PeftModel's base, or itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def prompt_embeddings(model, inputs):
    """The prompts' input embeddings with the clips' audio features in place of the audio tokens,
    exactly as Qwen2-Audio's forward builds them for its language model."""
    inner = audio_model(model).model
    captured = {}

    def capture(module, args, kwargs):
        captured["embeds"] = kwargs["inputs_embeds"]
        raise _Captured

    handle = inner.language_model.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        inner(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            input_features=inputs["input_features"],
            feature_attention_mask=inputs["feature_attention_mask"],
        )
    except _Captured:
        pass
    finally:
        handle.remove()
    return captured["embeds"]


def decoder_view(model):
    """A ``Qwen2ForCausalLM`` whose decoder and LM head are the policy's own modules (built once per
    model, on the meta device, then pointed at them: nothing is copied or registered on the policy)."""
    import torch
    from transformers import AutoModelForCausalLM

    inner = audio_model(model)
    view = inner.__dict__.get(VIEW)
    if view is None:
        with torch.device("meta"):
            view = AutoModelForCausalLM.from_config(inner.config.text_config)
        view.model, view.lm_head = inner.model.language_model, inner.lm_head
        view.generation_config = inner.generation_config
        inner.__dict__[VIEW] = view  # plain attribute: not a submodule, not in the state dict
    return view


def under_autocast(config, model) -> bool:
    """Whether generation runs under bf16 autocast: ``bf16`` over fp32 weights (fp32 masters: no LoRA,
    no DeepSpeed).  bf16 weights (LoRA's frozen base, DeepSpeed's copy) compute in bf16 as they are."""
    import torch

    return config.bf16 and next(model.parameters()).dtype == torch.float32


def static_cache_kwargs(config, prompt_tokens: int, autocast: bool = False) -> dict:
    """``generate`` settings of the static cache (one length for every chunk, so the compiled decoding
    step is reused), or none when the prompt is longer than the cache allows or the decoder runs
    under autocast (fp32 master weights, ``bf16`` without LoRA or DeepSpeed): there the prefill's keys
    come out in fp32 and the decoding steps' in bf16 (the residual stream stays fp32, the projections
    are autocast), and the static cache, allocated in the first one's dtype, refuses the other."""
    rollout = config.rollout
    if rollout.cache != "static" or prompt_tokens > rollout.max_prompt_tokens or autocast:
        return {}
    return {"cache_implementation": "static", "max_cache_len": rollout.max_prompt_tokens + config.max_completion_length}


def warm_up(model, processor, config, rows: int, device) -> None:
    """Compile the static cache's decoding step before training (CUDA only): one generation of two
    tokens from a dummy chunk of ``rows`` rows, with the cache length every rollout uses."""
    import torch

    rollout = config.rollout
    view = decoder_view(model)
    dtype = next(view.parameters()).dtype
    kwargs = static_cache_kwargs(config, 8, autocast=under_autocast(config, model))
    if not kwargs or rollout.prompt_logits != "last" or torch.device(device).type != "cuda":
        return
    embeds = torch.zeros(rows, 8, view.config.hidden_size, device=device, dtype=dtype)
    mask = torch.ones(rows, 8, dtype=torch.long, device=device)
    with torch.no_grad():  # four tokens: the decoding steps' growing mask length is seen, compiled dynamic
        view.generate(
            inputs_embeds=embeds,
            attention_mask=mask,
            max_new_tokens=4,
            do_sample=False,
            pad_token_id=processor.tokenizer.pad_token_id,
            **kwargs,
        )

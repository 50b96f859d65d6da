"""The items of each phase of the memory plan (:mod:`.arithmetic`'s docstring says what each phase holds):
what stays held (weights, gradients, moments, DeepSpeed's copies), autocast's weight copies, and the
sampling, rewards and update moments, each item counted from the code that allocates it or fitted
(:mod:`.terms`)."""

from __future__ import annotations

from .setup import HEAD_TILE, MERGE_BYTES, Setup
from .shapes import AUDIO_FRAMES


def _shards(s: Setup, applies: bool) -> int:
    """What ZeRO divides a term by: the ranks where it shards it, else 1."""
    return s.ranks if applies else 1


def _b16(s: Setup) -> int:
    """Bytes of a frozen weight, an activation, a KV entry."""
    return 2 if s.bf16 else 4


def _held(s: Setup) -> tuple[list, list, list, list]:
    """What the run holds: (kept through the run; the gradients, alive from the first micro-batch's backward
    to the end of the optimizer step; AdamW's moments, from step 1's optimizer step on; the optimizer step's
    moments as (moment, items besides those))."""
    p, stage, lora, b16 = s.arch.parameters, s.stage, s.lora_parameters, _b16(s)
    trained = lora if lora is not None else p
    keep: list = []
    grads: list = []
    moments: list = []
    optimizer: list = []
    if lora is not None:
        keep.append(("frozen base", b16 * p / _shards(s, stage == 3), f"{p / 1e9:.2f} B x {b16} bytes"))
    if stage is None:
        w = 4 if (s.masters or not s.bf16 or lora is not None) else 2
        name = "LoRA adapters" if lora is not None else "policy weights"
        kind = "fp32" if lora is not None else "fp32 masters" if w == 4 and s.bf16 else "bf16, updated in place"
        kind = kind if s.bf16 else "fp32"
        keep.append((name, w * trained, f"{trained / 1e9:.3f} B x {w} bytes ({kind})"))
        grads.append(("gradients", w * trained, f"{w} bytes a trained parameter"))
        moments.append(("AdamW moments", 2 * w * trained, f"2 x {w} bytes a trained parameter"))
        optimizer.append(("step", []))
    else:
        ranks1, ranks2 = _shards(s, stage >= 1), _shards(s, stage >= 2)
        if lora is None:
            keep.append(("policy weights (bf16, flat)", 2 * p / _shards(s, stage == 3), "2 bytes a parameter"))
        else:
            keep.append(("LoRA adapters (bf16)", 2 * trained, "2 bytes a trained parameter"))
        keep.append(("DeepSpeed fp32 master partition", 4 * trained / ranks1, "4 bytes / ranks"))
        moments.append(("AdamW moments (fp32 partition)", 8 * trained / ranks1, "8 bytes / ranks"))
        grads.append(("gradient partition (bf16)", 2 * trained / ranks2, f"2 bytes{' / ranks' * (stage >= 2)}"))
        fp32_grads = ("fp32 gradient partition", 4 * trained / ranks1, "4 bytes / ranks, in the step")
        flat = ("its flat bf16 copy", 2 * trained / ranks1, "2 bytes / ranks, flattened before the fp32 copy")
        optimizer += [("flattening the gradients", [flat, fp32_grads]), ("step", [fp32_grads])]
    if s.beta > 0 and lora is None:
        keep.append(("reference model", b16 * p / _shards(s, stage == 3), f"frozen, {b16} bytes a parameter"))
    if s.reasoner is not None:
        r = s.reasoner
        keep.append(("reasoner weights", r.parameters * s.reasoner_bytes, f"{r.parameters / 1e9:.2f} B in process"))
    return keep, grads, moments, optimizer


def _autocast_copies(s: Setup) -> tuple[list, list]:
    """Autocast's bf16 copies of the fp32 weights its ops cast, cached until the context exits, in
    inference and in training: not the token embeddings (an embedding lookup is not cast); in training not
    the LM head either (TRL's fused head casts it a vocabulary chunk at a time)."""
    if not s.autocast:
        return [], []
    p, embedding = s.arch.parameters, s.arch.vocab * s.arch.hidden
    return (
        [("autocast's bf16 weight copies", 2 * (p - embedding), "2 bytes a weight autocast casts")],
        [("autocast's bf16 weight copies", 2 * (p - 2 * embedding), "the same but the LM head")],
    )


def _sampling(s: Setup, cast: list) -> list:
    """The rollout's moments: the prefill, the end of decoding and, with merged LoRA, the merging."""
    a, b16, lora = s.arch, _b16(s), s.lora_parameters
    res = a.residual_bytes(b16, s.autocast)
    rows, prompt, total_tokens = s.generation_rows, s.prompt_tokens, s.prompt_tokens + s.completion_tokens
    how = f"{rows} rows"
    # the keys after RoPE are in the residual stream's dtype, and a dynamic cache holds the values in the keys'
    key = res
    if s.static_cache_tokens is not None:
        full = a.kv_cache_bytes(rows, s.static_cache_tokens + s.completion_tokens, b16)
        prefill_kv = end_kv = [
            ("static KV cache", full, f"{how} x {s.static_cache_tokens + s.completion_tokens} tokens")
        ]
    else:
        prefill_kv = [("KV cache of the prompts", a.kv_cache_bytes(rows, prompt, key), f"{how} x {prompt} tokens")]
        end_kv = [
            ("KV cache, prompt + completion", a.kv_cache_bytes(rows, total_tokens, key), f"{how} x {total_tokens}"),
            ("one layer's keys, copied as they grow", rows * total_tokens * a.kv_dim * key, "torch.cat"),
        ]
    embeds = []
    if s.prompt_logits == "last":
        embeds = [("prompt embeddings", rows * prompt * a.hidden * res, f"{how} x {prompt} x {a.hidden}")]
    positions = prompt if s.prompt_logits == "all" else 1
    logits = [("prompt logits", rows * positions * a.vocab * b16, f"{how} x {positions} positions x {a.vocab}")]
    if s.bf16 and s.stage is None:  # accelerate's autocast wrapper returns fp32 outputs
        logits.append(("their fp32 copy", rows * positions * a.vocab * 4, "accelerate's convert_outputs_to_fp32"))
    working = [("one layer's working set", a.layer_inference_bytes(rows, prompt, b16, s.autocast), f"{how} x {prompt}")]
    if lora is not None and not s.lora_merged:
        working.append(("unmerged adapters' working set", a.lora_inference_bytes(rows, prompt, s.lora), "fp32"))
    prefill = max(working, logits, key=lambda items: sum(b for _, b, _ in items))
    sampling = [("prefill", cast + embeds + prefill_kv + prefill), ("decoding", cast + embeds + end_kv)]
    if lora is not None and s.lora_merged:
        widest = max(o * i for i, o in a.adapted(s.lora))
        merging = ("merging the adapters", MERGE_BYTES * widest, f"{MERGE_BYTES} bytes x the widest adapted weight")
        sampling.append(("merging the adapters", [merging]))
    return sampling


def _rewards(s: Setup) -> list:
    """The rewards' moments: the reference model's log-probabilities (beta > 0), the reasoner in process."""
    micro, sequence = s.micro_rows, s.prompt_tokens + s.completion_tokens
    rewards: list = [("rewards", [])]
    if s.beta > 0:
        ref = s.arch.layer_inference_bytes(micro, sequence, _b16(s))
        rewards.append(("reference log-probs", [("reference forward", ref, f"{micro} rows x {sequence}, no gradient")]))
    if s.reasoner is not None:
        kv = s.reasoner.kv_cache_bytes(s.reasoner_batch, s.reasoner_tokens, s.reasoner_bytes)
        rewards.append(("reasoner", [("reasoner KV cache", kv, f"{s.reasoner_batch} x {s.reasoner_tokens} tokens")]))
    return rewards


def _update(s: Setup, fit: dict, grads: list, cast_training: list) -> list:
    """One micro-batch's forward end and backward, every gradient alive."""
    a, b16, lora, autocast = s.arch, _b16(s), s.lora_parameters, s.autocast
    res = a.residual_bytes(b16, autocast)
    micro, sequence = s.micro_rows, s.prompt_tokens + s.completion_tokens
    mhow = f"{micro} rows x {sequence} tokens"
    tower = lora is None  # a frozen tower (LoRA on the decoder) keeps nothing for the backward
    audio_inputs = a.audio_layers * micro * AUDIO_FRAMES * a.audio_dim * res if tower else 0
    layer_bytes = a.layer_training_bytes(micro, sequence, b16, autocast)
    if lora is not None:
        layer_bytes += a.lora_training_bytes(micro, sequence, s.lora)
    # outside the checkpointed layers: the decoder's final norm keeps its input and output (fp32 under autocast:
    # 8 h bytes a token; else the input, its fp32 upcast and the output: 6 h in 16 bits); the audio tower's
    # convolutional stem keeps conv1's and conv2's outputs and GELU's (3,000 and 1,500 frames) for the tower
    compute = 2 if s.bf16 else 4
    outside = micro * sequence * a.hidden * (8 if autocast else 3 * b16)
    outside += micro * a.audio_dim * (2 * 2 * AUDIO_FRAMES + AUDIO_FRAMES) * compute if tower else 0
    # and the tower's final LayerNorm its input and output, the projector the cast of its (pooled) input
    outside += micro * a.audio_dim * AUDIO_FRAMES * (2 * res + compute / 2) if tower else 0
    saved_outside = [("activations outside the layers", outside, "the final norms; the audio tower's stem")]
    if s.checkpointing:
        saved = [("decoder layer inputs", a.layers * micro * sequence * a.hidden * res, f"{a.layers} layers, {mhow}")]
        if tower:
            saved.append(("audio tower layer inputs", audio_inputs, f"{a.audio_layers} layers x {AUDIO_FRAMES} frames"))
        k = fit["backward factor"]
        layer = [("one layer's backward", k * layer_bytes, f"{k:g} x one layer's working set: recomputed + gradients")]
    else:
        # an encoder layer keeps its two LayerNorms' inputs and outputs, q, k, v, the attention output, fc1 and GELU
        audio_all = a.audio_layers * micro * AUDIO_FRAMES * (16 * a.audio_dim + 4 * a.audio_ffn) * b16 / 2
        saved = [("every layer's activations", a.layers * layer_bytes, mhow)]
        if tower:
            saved.append(("audio tower activations", audio_all, f"{a.audio_layers} layers x {AUDIO_FRAMES} frames"))
        layer = [("one layer's gradients", layer_bytes, "")]
    tile = HEAD_TILE * 32768 * 2 + 32768 * a.hidden * 2  # TRL kernels/chunked_logprob.py: mm_buf, a weight chunk
    copy = 2 if b16 == 2 and not autocast else 0  # grad_weight.to(weight.dtype): a copy only of bf16 weights
    head_grad = (a.vocab * a.hidden * (4 + copy) if lora is None else 0) + tile
    head = [
        ("fused LM head's backward", head_grad, f"fp32 weight gradient{' + its bf16 copy' * bool(copy)} + one tile")
    ]
    head_forward = [("fused LM head's forward", tile, f"one {HEAD_TILE} x 32768 tile and a weight chunk, in bf16")]
    buckets = []
    if s.stage is not None and s.stage >= 2:
        count = 2 if s.overlap_comm else 1
        buckets.append(("reduce buckets", count * s.reduce_bucket * 2, f"{count} x {s.reduce_bucket:.3g} elements"))
    saved += saved_outside
    return [
        ("forward end", grads + buckets + cast_training + saved + head_forward),
        ("backward", grads + buckets + saved + max(layer, head, key=lambda items: sum(b for _, b, _ in items))),
    ]

"""``make gpu-check``'s decoding floor (:mod:`gpu_check`): the milliseconds a decoding step needs at the
card's published HBM bandwidth, beside which the rollout's measured milliseconds per step are read."""

from __future__ import annotations

HBM_BYTES_PER_S = {"H100": 3.35e12, "H200": 4.8e12, "A100": 2.0e12}  # published peaks


def decode_floor(model, lm, prompt_tokens: int) -> dict | None:
    """Milliseconds a decoding step needs at the card's published bandwidth: the decoder and LM head's
    bf16 weights, and the KV cache of a chunk halfway through its completion."""
    import torch

    from autagent.policies.lm.plan.shapes import Architecture

    name = torch.cuda.get_device_name()
    bandwidth = next((bw for key, bw in HBM_BYTES_PER_S.items() if key in name), None)
    if bandwidth is None:
        return None
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    weights = 2 * sum(p.numel() for p in inner.model.language_model.parameters()) + 2 * inner.lm_head.weight.numel()
    arch = Architecture.of(lm.model_id)
    kv = arch.kv_cache_bytes(lm.generation_batch_size, prompt_tokens + lm.max_completion_length // 2, 2)
    return {
        "card": name,
        "weights_ms": round(1e3 * weights / bandwidth, 2),
        "with_kv_ms": round(1e3 * (weights + kv) / bandwidth, 2),
    }

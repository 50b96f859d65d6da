"""Sampling with LoRA's adapters merged into the weights, the weights given back bit for bit after.

The one-GPU recipe keeps the base frozen in bf16 and the adapters in fp32.  Unmerged, every decoding
step runs seven small fp32 products per decoder layer beside the bf16 ones (on an H100, 19.3 ms a step
for the 8.40 B shapes against 12.4 with bf16 weights alone; 22-24 ms inside the trainer).  Merged, the
rollout decodes with the bf16 weights alone.  The training forward (the log-probabilities and their
gradients) runs with the adapters unmerged, as before; sampling draws from ``round(W + BA)``, which
differs from the unmerged policy by bf16's rounding, the order of computing in bf16 at all.

peft's ``merge`` adds the adapter's delta to the bf16 weight and its ``unmerge`` subtracts the delta
cast to bf16: the weight that comes back is not the one that went in everywhere, and the frozen base,
which is also the reference model, would drift a little with every rollout.  :func:`merge_exactly`
computes the round trip before it merges and keeps, in host memory, the elements it would not restore
with their values (where ``W + BA`` rounds up over a power of two, or ``W`` is small beside ``BA``: about
1 % of the elements for a delta a 250th of the weight on the tiny model, 2 % for a 60th), or a copy of the
whole weight where that is smaller; :func:`unmerge_exactly` subtracts the delta as the check did and puts
them back.  The delta is recomputed for the unmerge from the same adapters on the same device (nothing
trains while sampling), so the subtraction repeats the one checked.  GPU memory: one adapted weight's
transient at a time, about 14 bytes an element (``.plan.arithmetic.MERGE_BYTES``); nothing held.
"""

from __future__ import annotations

from contextlib import contextmanager


def lora_layers(model) -> list:
    """peft's LoRA linear layers in ``model`` whose active adapters are not merged yet."""
    from peft.tuners.lora import Linear

    return [m for m in model.modules() if isinstance(m, Linear) and not m.merged and not m.disable_adapters]


def merge_exactly(layer) -> list:
    """Merge ``layer``'s active adapter into its base weight; returns what :func:`unmerge_exactly` needs to
    give the weight back exactly, in host memory: ``[(adapter, flat indices, values)]`` of the elements a
    plain subtraction would not restore, or ``[(adapter, None, the whole weight)]`` where that is smaller."""
    import torch

    weight = layer.get_base_layer().weight
    names = [name for name in layer.active_adapters if name in layer.lora_A and name not in layer.lora_variant]
    if len(names) != 1:  # several adapters at once (or a variant such as DoRA): left as they are
        return []
    with torch.no_grad():
        delta = layer.get_delta_weight(names[0]).to(device=weight.device, dtype=torch.float32)
        merged = weight.to(torch.float32, copy=True).add_(delta).to(weight.dtype)
        wrong = _unmerged(merged, delta, weight.dtype).ne(weight).view(-1).nonzero().squeeze(1)
        if len(wrong) * (4 + weight.element_size()) < weight.numel() * weight.element_size():
            kept = [(names[0], wrong.to("cpu", torch.int32), weight.view(-1)[wrong].cpu())]
        else:
            kept = [(names[0], None, weight.detach().to("cpu", copy=True))]
        weight.copy_(merged)
    layer.merged_adapters.append(names[0])
    return kept


def unmerge_exactly(layer, kept: list) -> None:
    """Undo :func:`merge_exactly`: subtract each delta as the merge checked it, then restore the kept elements
    (or the whole weight kept)."""
    import torch

    weight = layer.get_base_layer().weight
    with torch.no_grad():
        for name, wrong, values in reversed(kept):
            if wrong is None:
                weight.copy_(values)
            else:
                delta = layer.get_delta_weight(name).to(device=weight.device, dtype=torch.float32)
                weight.copy_(_unmerged(weight, delta, weight.dtype))
                weight.view(-1)[wrong.to(weight.device).long()] = values.to(weight.device)
            layer.merged_adapters.remove(name)


def _unmerged(merged, delta, dtype):
    """The weight a merged one gives back: ``merged - delta`` in fp32 (a copy), rounded to the weight's dtype."""
    import torch

    return merged.to(torch.float32, copy=True).sub_(delta).to(dtype)


@contextmanager
def merged_adapters(model, enabled: bool = True):
    """``model`` with every LoRA adapter merged into its weights inside the block, unmerged exactly after
    (also when the block raises).  A model without LoRA, or ``enabled=False``, passes through unchanged."""
    layers = lora_layers(model) if enabled else []
    done = []
    try:
        for layer in layers:
            kept = merge_exactly(layer)
            if layer.merged:
                done.append((layer, kept))
        yield model
    finally:
        for layer, kept in reversed(done):
            unmerge_exactly(layer, kept)

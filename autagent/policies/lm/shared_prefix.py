"""A text policy's prompts computed once where they are the same: the CPU's share of a GRPO step.

Every prompt of the text policy begins with the same instructions and tool list (about 200 of its
~280 tokens), and GRPO scores each prompt ``group_size`` times.  Run as TRL runs them, a step of 8
prompts x 6 completions pushes 48 x 280 tokens through the model three times (sampling, the loss's
forward and its backward); here the common prefix goes through once, each distinct prompt's own
tokens once, and only the completions once per row, attending to the cached keys and values of what
they share (:class:`Tree`).  The cache keeps its autograd graph, so the gradient is the full one: the
prefix's and the prompts' own tokens receive the completions' gradients through their keys and
values, exactly as in the unshared forward (the test compares both).

Layout in the cache: ``[prefix | left-padded prompt tails | completion]``, with explicit position ids,
so a padded row computes what it would alone (rotary positions count real tokens only).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Tree:
    prefix: list[int]
    """Tokens every prompt begins with (kept one shorter than the shortest prompt)."""
    tails: list[list[int]]
    """The distinct prompts' remaining tokens (at least one each)."""
    rows: list[int]
    """For each row, the index of its prompt in ``tails``."""


def tree_of(prompts: list[list[int]]) -> Tree:
    distinct: dict[tuple, int] = {}
    rows = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
    unique = [list(p) for p in distinct]
    shortest = min(len(p) for p in unique)
    common = 0
    while common < shortest - 1 and all(p[common] == unique[0][common] for p in unique):
        common += 1
    return Tree(unique[0][:common], [p[common:] for p in unique], rows)


def _cache(pairs, index=None):
    from transformers import DynamicCache

    if index is None:
        return DynamicCache(ddp_cache_data=list(pairs))
    return DynamicCache(ddp_cache_data=[(k.index_select(0, index), v.index_select(0, index)) for k, v in pairs])


def _pairs(cache) -> list:
    return [(layer.keys, layer.values) for layer in cache.layers]


@dataclass
class Encoded:
    pairs: list
    """Per layer (keys, values) of ``[distinct prompts, heads, length, dim]``."""
    mask: object
    """``[distinct prompts, length]``: 1 where a real token sits."""
    lengths: object
    """``[distinct prompts]``: real tokens in the cache (the next position id)."""
    last_logits: object
    """``[distinct prompts, vocab]``: the next-token logits after each whole prompt (``keep_last=True``)."""


def encode(model, tree: Tree, pad_id: int, keep_last: bool = True) -> Encoded:
    """The distinct prompts through the model, their prefix once; ``keep_last=False`` leaves each prompt's
    last token out (the completion pass feeds it, to predict the first completion token)."""
    import torch

    device = next(model.parameters()).device
    count, p = len(tree.tails), len(tree.prefix)
    pairs = None
    if p:
        out = model(input_ids=torch.tensor([tree.prefix], device=device), use_cache=True, logits_to_keep=1)
        pairs = _pairs(out.past_key_values)
    tails = [t if keep_last else t[:-1] for t in tree.tails]
    width = max(len(t) for t in tails)
    own = torch.tensor([len(t) for t in tails], device=device)
    index = torch.zeros(count, dtype=torch.long, device=device)
    mask = torch.ones(count, p, dtype=torch.long, device=device)
    logits = None
    if width:
        ids = torch.tensor([[pad_id] * (width - len(t)) + t for t in tails], device=device)
        tail_mask = (torch.arange(width, device=device)[None] >= (width - own)[:, None]).long()
        position = p + (tail_mask.cumsum(1) - 1).clamp(min=0)
        mask = torch.cat([mask, tail_mask], dim=1)
        cache = _cache(pairs, index) if pairs is not None else None
        out = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=position,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        pairs, logits = _pairs(out.past_key_values), out.logits[:, -1]
    else:
        pairs = [(k.index_select(0, index), v.index_select(0, index)) for k, v in pairs]
    return Encoded(pairs, mask, p + own, logits)


def completion_logps(model, input_ids, attention_mask, logits_to_keep: int, pad_id: int, scorer=None):
    """TRL's per-token log-probabilities and entropies of the completions (the last ``logits_to_keep`` columns
    of ``input_ids``), from a model TRL gave its fused LM head (temperature applied there; padding is 0).

    ``scorer(logits, completion, completion_mask) -> (log_probs, entropy)``: the completions' logits (``[rows,
    k, vocab]``, position j predicting completion token j) scored by the caller instead of the fused head,
    as constrained decoding scores them under the answer grammar's mask (:func:`.trainer.grammar_logps`)."""
    import torch

    k = logits_to_keep
    prompts, prompt_mask = input_ids[:, :-k], attention_mask[:, :-k]
    tree = tree_of([row[m.bool()].tolist() for row, m in zip(prompts, prompt_mask)])
    enc = encode(model, tree, pad_id, keep_last=False)
    index = torch.tensor(tree.rows, device=input_ids.device)
    completion, completion_mask = input_ids[:, -k:], attention_mask[:, -k:]
    last = torch.tensor([[tree.tails[u][-1]] for u in tree.rows], device=input_ids.device)
    fed = torch.cat([last, completion[:, :-1]], dim=1)
    fed_mask = torch.cat([torch.ones_like(last), completion_mask[:, :-1]], dim=1)
    common = dict(
        input_ids=fed,
        attention_mask=torch.cat([enc.mask.index_select(0, index), fed_mask], dim=1),
        position_ids=enc.lengths.index_select(0, index)[:, None] + torch.arange(k, device=input_ids.device),
        past_key_values=_cache(enc.pairs, index),
    )
    if scorer is not None:
        return scorer(model(**common).logits, completion, completion_mask)
    out = model(**common, shift_labels=completion.masked_fill(completion_mask == 0, -100), fused_lm_head=True)
    return out.log_probs, out.entropy


def sample(
    model,
    prompts: list[list[int]],
    eos_id: int,
    pad_id: int,
    max_new: int,
    do_sample: bool,
    temperature=1.0,
    stop: list[int] | None = None,
    allowed=None,
):
    """Completions (token lists up to and including EOS, or ending with the ``stop`` tokens) for ``prompts``,
    sampled at ``temperature`` from the full distribution (top_k 0, top_p 1, as the audio rollout samples) or
    greedy; shared prefix and repeated prompts computed once.  ``allowed(completion so far) -> token ids``
    (an :class:`~.prompt.AnswerGrammar`'s ``allowed``): every other token's logit is -inf before sampling or
    the argmax, the distribution the log-probability passes score under the same mask."""
    import torch

    device = next(model.parameters()).device
    tree = tree_of(prompts)
    with torch.no_grad():
        enc = encode(model, tree, pad_id, keep_last=True)
        index = torch.tensor(tree.rows, device=device)
        cache = _cache(enc.pairs, index)
        mask = enc.mask.index_select(0, index)
        position = enc.lengths.index_select(0, index)
        logits = enc.last_logits.index_select(0, index)
        rows = len(prompts)
        out_ids = [[] for _ in range(rows)]
        done = torch.zeros(rows, dtype=torch.bool, device=device)
        for step in range(max_new):
            scores = logits.float()
            if allowed is not None:
                scores = masked_scores(scores, [None if done[r] else out_ids[r] for r in range(rows)], allowed)
            if do_sample:
                token = torch.multinomial(torch.softmax(scores / temperature, dim=-1), 1).squeeze(1)
            else:
                token = scores.argmax(-1)
            token = torch.where(done, torch.full_like(token, pad_id), token)
            for r in torch.nonzero(~done).squeeze(1).tolist():
                out_ids[r].append(int(token[r]))
                if stop and out_ids[r][-len(stop) :] == stop:
                    done[r] = True
            done |= token == eos_id
            if bool(done.all()) or step == max_new - 1:
                break
            mask = torch.cat([mask, torch.ones(rows, 1, dtype=mask.dtype, device=device)], dim=1)
            out = model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=position[:, None],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            cache, logits, position = out.past_key_values, out.logits[:, -1], position + 1
    return out_ids


def masked_scores(scores, completions: list, allowed):
    """``scores`` with -inf at every token ``allowed(completion)`` does not list (rows whose completion is
    None, finished ones, are left as they are)."""
    import torch

    masked = scores.clone()
    for r, ids in enumerate(completions):
        if ids is not None:
            keep = torch.tensor(allowed(ids), device=scores.device)
            masked[r] = float("-inf")
            masked[r, keep] = scores[r, keep]
    return masked

"""Choice scoring by a causal LM, many prompts and choices in one forward pass.

Every prompt of a batch is a path of token *pieces* (the BOS, one record line each, the question),
and every choice hangs off its prompt's last token.  Pieces shared by several prompts (the BOS, the
same record lines in the same order: one query's tool subsets share most of theirs) are laid out
once, as a tree, and the whole tree goes through the model as one sequence: each token attends to
its ancestors only (a tree attention mask) at its depth as position.  That is the KV-cache reuse of
a shared prefix, for every branch at once, in one pass.  Attention runs by blocks of consecutive
queries, each over the keys its tokens may see (:class:`TreeMask`).
The 262k-token output projection is applied only at the positions that predict a choice token (a
choice's log-likelihood), never at the prompts', once per position, a slice of the vocabulary at a time.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Prompt:
    """One prompt to score choices after: its pieces, each ``(key, token ids)``; equal keys on equal
    paths are laid out once.  ``choices`` are token ids of each continuation."""

    pieces: list[tuple[object, list[int]]]
    choices: list[list[int]]


@dataclass
class Pack:
    """Prompts laid out as one tree: tokens, each token's parent (-1: a root) and depth, and for each
    prompt's choice ``(prompt, choice)`` the rows that predict its tokens and the token ids."""

    tokens: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    scored: list[tuple[int, int, list[int], list[int]]] = field(default_factory=list)
    _nodes: dict = field(default_factory=dict)  # path of piece keys -> index of its last token

    @staticmethod
    def _paths(prompt: Prompt):
        """Each node ``prompt`` needs: ``(path of keys, token ids)``: its pieces, then its choices'
        tokens one node each, all but a choice's last (it predicts nothing scored), so choices that
        begin alike (and the same prompt asked twice) share their nodes."""
        path = ()
        for key, ids in prompt.pieces:
            path = path + (key,)
            yield path, ids
        for ids in prompt.choices:
            if not ids:
                raise ValueError("a choice with no tokens cannot be scored")
            node = path
            for token in ids[:-1]:
                node = node + (("choice", token),)
                yield node, [token]

    def cost(self, prompt: Prompt) -> int:
        """Tokens ``prompt`` would add (the nodes of its pieces and choices not laid out yet)."""
        new = {path: len(ids) for path, ids in self._paths(prompt) if path not in self._nodes}
        return sum(new.values())

    def _append(self, ids: list[int], parent: int) -> int:
        for token in ids:
            self.tokens.append(int(token))
            self.parent.append(parent)
            self.depth.append(self.depth[parent] + 1 if parent >= 0 else 0)
            parent = len(self.tokens) - 1
        return parent

    def add(self, index: int, prompt: Prompt) -> None:
        for path, ids in self._paths(prompt):
            if path not in self._nodes:
                self._nodes[path] = self._append(ids, self._nodes.get(path[:-1], -1))
        end = tuple(key for key, _ in prompt.pieces)
        for c, ids in enumerate(prompt.choices):
            node, rows = end, [self._nodes[end]]  # row k predicts token k
            for token in ids[:-1]:
                node = node + (("choice", token),)
                rows.append(self._nodes[node])
            self.scored.append((index, c, rows, list(ids)))

    def masks(self, window: int | None) -> tuple[np.ndarray, np.ndarray]:
        """``[n, n]`` boolean masks (True: may attend): ancestors and self; and the same within
        ``window`` positions, for sliding-window layers."""
        n = len(self.tokens)
        mask = np.zeros((n, n), dtype=bool)
        for i, p in enumerate(self.parent):
            if p >= 0:
                mask[i, : p + 1] = mask[p, : p + 1]
            mask[i, i] = True
        if window is None:
            return mask, mask
        depth = np.asarray(self.depth)
        return mask, mask & ((depth[:, None] - depth[None, :]) < window)

    def attention(self, window: int | None, block: int) -> dict[str, object]:
        """The attention mask of each layer type (``full_attention``, ``sliding_attention``): ``block``
        queries at a time (:class:`TreeMask`), or, with ``block`` 0, one dense ``[1, 1, n, n]`` mask."""
        import torch

        full, sliding = self.masks(window)
        if block <= 0:
            return {
                "full_attention": torch.from_numpy(full)[None, None],
                "sliding_attention": torch.from_numpy(sliding)[None, None],
            }
        return {"full_attention": TreeMask.of(full, block), "sliding_attention": TreeMask.of(sliding, block)}


@dataclass
class TreeMask:
    """A tree's attention by blocks of consecutive queries: each block attends only to the keys one of
    its tokens may see (its ancestors: one path from the root, shared by neighbours in the layout),
    gathered, under the block's own mask.  In the bench's passes a token sees a sixth of the pass and
    blocks of 64 compute a quarter of the scores one dense ``n x n`` masked attention computes (the
    rest are masked: exactly zero after the softmax)."""

    blocks: list[tuple[int, int, object, object]]
    """``(first query, end, key indices [m], mask [1, 1, end - first, m])``"""

    @classmethod
    def of(cls, mask: np.ndarray, block: int) -> TreeMask:
        import torch

        blocks = []
        for start in range(0, len(mask), block):
            rows = mask[start : start + block]
            keys = np.flatnonzero(rows.any(0))
            blocks.append(
                (start, start + len(rows), torch.from_numpy(keys), torch.from_numpy(rows[:, keys])[None, None])
            )
        return cls(blocks)


PASS_MASK: ContextVar[TreeMask | None] = ContextVar("PASS_MASK", default=None)
"""The tree mask of the pass under way, for a model whose forward takes no per-layer-type mask mapping
(Llama builds its own causal mask from whatever it is given): every layer attends under this one."""


def takes_mask_mapping(model) -> bool:
    """Whether ``model`` has sliding-window layers, whose forward (Gemma 3's) takes a mask per layer type as a
    dict; a model without them gets its tree mask through :data:`PASS_MASK`."""
    return getattr(model.config, "sliding_window", None) is not None


def tree_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """transformers' attention interface over a :class:`TreeMask` (any other mask: its SDPA)."""
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    through = PASS_MASK.get()
    attention_mask = attention_mask if through is None else through
    if not isinstance(attention_mask, TreeMask):
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    out = []
    for start, end, keys, mask in attention_mask.blocks:
        k, v = repeat_kv(key[:, :, keys], groups), repeat_kv(value[:, :, keys], groups)
        out.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, start:end], k, v, attn_mask=mask, scale=scaling
            )
        )
    return torch.cat(out, dim=2).transpose(1, 2).contiguous(), None


TREE_ATTENTION = "autagent_tree"


def use_tree_attention(model) -> None:
    """Route ``model``'s attention through :func:`tree_attention` (registered with transformers once)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(TREE_ATTENTION, tree_attention)
    AttentionMaskInterface.register(TREE_ATTENTION, sdpa_mask)  # generate() builds SDPA's masks
    model.set_attn_implementation(TREE_ATTENTION)


def pack_prompts(prompts: list[Prompt], max_tokens: int) -> list[Pack]:
    """Prompts grouped into packs of at most ``max_tokens`` tokens (a prompt longer than that alone)."""
    packs: list[Pack] = []
    current = Pack()
    for i, prompt in enumerate(prompts):
        if current.scored and len(current.tokens) + current.cost(prompt) > max_tokens:
            packs.append(current)
            current = Pack()
        current.add(i, prompt)
    if current.scored:
        packs.append(current)
    return packs


def score_pack(model, pack: Pack, block: int = 64) -> dict[tuple[int, int], float]:
    """Summed log-likelihood of every scored choice: ``{(prompt, choice): log p}``; one forward pass,
    attention ``block`` queries at a time (0: one dense mask; either way under :func:`use_tree_attention`)."""
    import torch

    config = model.config
    if config._attn_implementation != TREE_ATTENTION:
        use_tree_attention(model)
    ids = torch.tensor([pack.tokens])
    positions = torch.tensor([pack.depth])
    masks = pack.attention(getattr(config, "sliding_window", None), block)
    given, through = masks, None  # Gemma 3: a mask per layer type
    if not takes_mask_mapping(model):  # one mask for every layer: a dense one as it is, blocks on the side
        full = masks["full_attention"]
        given, through = (None, full) if isinstance(full, TreeMask) else (full, None)
    token = PASS_MASK.set(through)
    try:
        with torch.inference_mode():
            out = model.model(input_ids=ids, position_ids=positions, attention_mask=given, use_cache=False)
    finally:
        PASS_MASK.reset(token)
    with torch.inference_mode():
        hidden = out.last_hidden_state[0]
        rows = [r for _, _, scored_rows, _ in pack.scored for r in scored_rows]
        targets = [t for _, _, _, ids_ in pack.scored for t in ids_]
        token_logp = choice_logp(
            hidden, rows, targets, model.lm_head.weight, getattr(config, "final_logit_softcapping", None)
        )
    scores, k = {}, 0
    for index, choice, _, ids_ in pack.scored:
        scores[(index, choice)] = float(sum(token_logp[k : k + len(ids_)]))
        k += len(ids_)
    return scores


def choice_logp(
    hidden, rows: list[int], targets: list[int], weight, softcap: float | None, chunk: int = 32768
) -> list[float]:
    """``log p(targets[k] | row rows[k])`` under the output projection ``weight`` ``[vocab, d]``: each
    row's logits once (a prompt's last row predicts every choice's first token), a ``chunk`` of the
    vocabulary at a time (the ``rows x vocab`` logits are never held at once), the normaliser by
    log-sum-exp over the chunks."""
    import torch

    unique = {r: k for k, r in enumerate(sorted(set(rows)))}
    at = torch.tensor([unique[r] for r in rows])
    hidden, want = hidden[list(unique)], torch.tensor(targets)
    picked, parts = torch.zeros(len(rows)), []
    for start in range(0, weight.shape[0], chunk):
        logits = torch.nn.functional.linear(hidden, weight[start : start + chunk]).float()
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        parts.append(torch.logsumexp(logits, dim=-1))
        inside = (want >= start) & (want < start + logits.shape[1])
        if inside.any():
            picked[inside] = logits[at[inside], want[inside] - start]
    return (picked - torch.logsumexp(torch.stack(parts, dim=-1), dim=-1)[at]).tolist()


def score_prompts(model, prompts: list[Prompt], max_tokens: int, block: int = 64) -> list[list[float]]:
    """Each prompt's choices' summed log-likelihoods, the prompts packed ``max_tokens`` to a pass."""
    # Prompts sorted by their pieces sit next to those they share a prefix with.
    order = sorted(range(len(prompts)), key=lambda i: [key for key, _ in prompts[i].pieces])
    out = [[0.0] * len(p.choices) for p in prompts]
    for pack in pack_prompts([prompts[i] for i in order], max_tokens):
        for (index, choice), value in score_pack(model, pack, block).items():
            out[order[index]][choice] = value
    return out

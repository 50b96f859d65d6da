"""Choice scoring by a causal LM, many prompts and choices in one forward pass.

Every prompt of a batch is a path of token *pieces* (the BOS, one record line each, the question),
and every choice hangs off its prompt's last token.  Pieces shared by several prompts (the BOS, the
same record lines in the same order: one query's tool subsets share most of theirs) are laid out
once, as a tree, and the whole tree goes through the model as one sequence: each token attends to
its ancestors only (a tree attention mask) at its depth as position.  That is the KV-cache reuse of
a shared prefix, for every branch at once, in one pass.  The 262k-token output projection is applied
only at the positions that predict a choice token (a choice's log-likelihood), never at the prompts'.
"""

from __future__ import annotations

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

    def cost(self, prompt: Prompt) -> int:
        """Tokens ``prompt`` would add (its unshared pieces and its choices)."""
        path, added = (), 0
        for key, ids in prompt.pieces:
            path = path + (key,)
            if path not in self._nodes:
                added += len(ids)
        return added + sum(len(c) for c in prompt.choices)

    def _append(self, ids: list[int], parent: int) -> int:
        for token in ids:
            self.tokens.append(int(token))
            self.parent.append(parent)
            self.depth.append(self.depth[parent] + 1 if parent >= 0 else 0)
            parent = len(self.tokens) - 1
        return parent

    def add(self, index: int, prompt: Prompt) -> None:
        path, last = (), -1
        for key, ids in prompt.pieces:
            path = path + (key,)
            if path not in self._nodes:
                self._nodes[path] = self._append(ids, last)
            last = self._nodes[path]
        for c, ids in enumerate(prompt.choices):
            if not ids:
                raise ValueError("a choice with no tokens cannot be scored")
            end = self._append(ids, last)
            rows = [last] + list(range(end - len(ids) + 1, end))  # row k predicts token k
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


def score_pack(model, pack: Pack) -> dict[tuple[int, int], float]:
    """Summed log-likelihood of every scored choice: ``{(prompt, choice): log p}``; one forward pass."""
    import torch

    config = model.config
    window = getattr(config, "sliding_window", None)
    full, sliding = pack.masks(window)
    ids = torch.tensor([pack.tokens])
    positions = torch.tensor([pack.depth])
    masks = {
        "full_attention": torch.from_numpy(full)[None, None],
        "sliding_attention": torch.from_numpy(sliding)[None, None],
    }
    with torch.inference_mode():
        hidden = model.model(input_ids=ids, position_ids=positions, attention_mask=masks, use_cache=False)
        hidden = hidden.last_hidden_state[0]
        rows = [r for _, _, scored_rows, _ in pack.scored for r in scored_rows]
        targets = torch.tensor([t for _, _, _, ids_ in pack.scored for t in ids_])
        logits = hidden[rows] @ model.lm_head.weight.T  # only where a choice token is predicted
        softcap = getattr(config, "final_logit_softcapping", None)
        logits = logits.float()
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        token_logp = torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0].tolist()
    scores, k = {}, 0
    for index, choice, _, ids_ in pack.scored:
        scores[(index, choice)] = float(sum(token_logp[k : k + len(ids_)]))
        k += len(ids_)
    return scores


def score_prompts(model, prompts: list[Prompt], max_tokens: int) -> list[list[float]]:
    """Each prompt's choices' summed log-likelihoods, the prompts packed ``max_tokens`` to a pass."""
    # Prompts sorted by their pieces sit next to those they share a prefix with.
    order = sorted(range(len(prompts)), key=lambda i: [key for key, _ in prompts[i].pieces])
    out = [[0.0] * len(p.choices) for p in prompts]
    for pack in pack_prompts([prompts[i] for i in order], max_tokens):
        for (index, choice), value in score_pack(model, pack).items():
            out[order[index]][choice] = value
    return out

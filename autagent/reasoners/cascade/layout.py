"""What the cascade's language model reads: one record per line, then the question, then ``Answer:``.

::

    [tempo] 113.0 BPM
    [chords] 0.0-3.2 s Abm, 3.2-5.3 s A
    Question: Roughly how many beats per minute is this?
    Answer: about 113 beats per minute

A small base model uses records written compactly in the notation people write (``tools.notation``)
and does not use the JSON block the other reasoners read (measured: ``../shared/STACK-NOTES.md``).
Records come in tool-id order, so one query's subsets share their leading lines (``scoring``
lays them out once).  Records longer than the prompt budget are cut, and the reply says so.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from tools.notation import render_line

from .scoring import Prompt

QUESTION = "Question: {question}\nAnswer:"
CHAT_QUESTION = "Question: {question}\nChoices: {choices}"
"""With a chat template (an instruction-tuned model): the question and its choices end the user's turn,
and the assistant's reply is the choice itself (no leading space)."""
CUT_MARK = " ...\n"


@dataclass
class Laid:
    prompt: Prompt
    note: str | None
    """Set when records were cut to fit the budget."""


def record_lines(records: list[dict] | None, max_items: int) -> list[tuple[str, str]]:
    """``(tool, line)`` for each readable record, in tool-id order (failed records are left out)."""
    usable = [r for r in records or [] if "error" not in r and r.get("output") is not None]
    return [(r["tool"], render_line(r, max_items=max_items) + "\n") for r in sorted(usable, key=lambda r: r["tool"])]


def lay_out(
    encode,
    bos: list[int],
    question: str,
    choices: list[str],
    records: list[dict] | None,
    *,
    max_items: int,
    max_prompt_tokens: int,
    chat_tail: str | None = None,
) -> Laid:
    """The prompt for one (question, records) pair.  A piece's key is its tokens: on the same path,
    the same tokens are the same computation, whichever query they came from.  With ``chat_tail`` (a
    chat template's close of the user turn and opening of the reply; ``bos`` is then its opening of the
    user turn) the question lists the choices and each choice is scored as the reply."""
    if chat_tail is None:
        question_ids = encode(QUESTION.format(question=question.strip()))
    else:
        shown = " | ".join(c.strip() for c in choices)
        question_ids = encode(CHAT_QUESTION.format(question=question.strip(), choices=shown) + chat_tail)
    budget = max_prompt_tokens - len(bos) - len(question_ids)
    pieces: list[tuple[object, list[int]]] = [(tuple(bos), bos)]
    cut_tools, shown_tokens, total_tokens = [], 0, 0
    for tool, line in record_lines(records, max_items):
        ids = encode(line)
        total_tokens += len(ids)
        room = budget - shown_tokens
        if room <= 0:
            cut_tools.append(tool)
            continue
        if len(ids) > room:
            ids = ids[: max(room - len(encode(CUT_MARK)), 0)] + encode(CUT_MARK)
            cut_tools.append(tool)
        shown_tokens += len(ids)
        pieces.append((tuple(ids), ids))
    pieces.append((tuple(question_ids), question_ids))
    choice_ids = [encode(c.strip() if chat_tail is not None else " " + c.strip()) for c in choices]
    note = None
    if cut_tools:
        note = (
            f"records cut to fit the context ({shown_tokens} of {total_tokens} record tokens shown, "
            f"max_prompt_tokens {max_prompt_tokens}): {', '.join(cut_tools)}"
        )
    return Laid(Prompt(pieces, choice_ids), note)


def neutral(encode, bos: list[int], prompt_text: str, choices: list[str], chat_tail: str | None = None) -> Prompt:
    """The calibration prompt: the choices after a prompt that says nothing about the question (with
    ``chat_tail``: as the reply to a user turn saying only that)."""
    if chat_tail is None:
        prompt_ids, choice_ids = encode(prompt_text), [encode(" " + c.strip()) for c in choices]
    else:
        prompt_ids, choice_ids = encode(prompt_text + chat_tail), [encode(c.strip()) for c in choices]
    return Prompt([(tuple(bos), bos), (tuple(prompt_ids), prompt_ids)], choice_ids)


class Calibration:
    """The calibration of choice scores: ``log p(choice | prompt) - log p(choice | neutral prompt)``, the
    second term removing how likely a choice's words are anyway.  Each choice's neutral score is
    computed once (by whoever scores: in process or over HTTP) and kept, the most recent ``size``."""

    def __init__(self, size: int):
        self.size = size
        self.neutral: OrderedDict[str, float] = OrderedDict()

    def unknown(self, requests) -> list[str]:
        """The choices of ``requests`` (``(sample, records)``) whose neutral score is not known yet."""
        return sorted({c for sample, _ in requests for c in sample.choices if c not in self.neutral})

    def learn(self, choices: list[str], scores: list[float]) -> None:
        for choice, value in zip(choices, scores):
            self.neutral[choice] = value
        while len(self.neutral) > self.size:
            self.neutral.popitem(last=False)

    def apply(self, rows: list[list[float]], requests) -> list[list[float]]:
        """Each row of choice scores less its choices' neutral scores."""
        return [[v - self.neutral[c] for v, c in zip(row, s.choices)] for row, (s, _) in zip(rows, requests)]

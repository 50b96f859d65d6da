"""MMAU / MMAR scoring: the official string match, and our figure beside it.

* ``official``: exactly the published scripts: string match of the raw reply against the answer,
  and a sample with no prediction is *skipped* (left out of the denominator).
* ours (``accuracy``): a reply that is a choice's label, such as "B" or "(B)", is read as that
  choice whenever the prompt labelled the choices; a missing or unparseable reply, a failed call
  and an unscorable row all count, as wrong.
"""

from __future__ import annotations

import re


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"\b\w+\b", text.lower()))


def string_match(answer: str, prediction: str | None, choices) -> bool:
    """True when every word of ``answer`` is in ``prediction`` and no word unique to a wrong choice is."""
    if prediction is None:
        return False
    predicted = _tokens(str(prediction))
    if not predicted:
        return False
    gold = _tokens(answer)
    wrong_only: set[str] = set()
    for choice in choices:
        tokens = _tokens(choice)
        if tokens != gold:
            wrong_only |= tokens - gold
    return gold <= predicted and predicted.isdisjoint(wrong_only)


LABEL = re.compile(r"^\(?\s*([A-Za-z])\s*\)?[.:)]?$")
LEADING_LABEL = re.compile(r"^\(?([A-Z])\)[\s.:]|^([A-Z])[.:]\s")


def resolve_reply(reply: str | None, choices, labelled: bool = True) -> str | None:
    """The choice a reply names when it names one by its label ("B", "(B)", "B.", "(B) text");
    otherwise the reply itself, for the string match to judge."""
    if reply is None or not labelled:
        return reply
    text = reply.strip()
    if any(text == c.strip() for c in choices):  # a choice that looks like a label ("D", the chord) is that choice
        return reply
    match = LABEL.match(text) or LEADING_LABEL.match(text)
    if match:
        index = ord(next(g for g in match.groups() if g).upper()) - ord("A")
        if 0 <= index < len(choices):
            return choices[index]
    return reply


def is_correct(sample, prediction: str | None, labelled: bool = True) -> bool:
    """Our figure: a reply read through its label, an unscorable row or missing reply wrong."""
    if sample.meta.get("unscorable"):
        return False
    return string_match(sample.answer, resolve_reply(prediction, sample.choices, labelled), sample.choices)


def official_correct(sample, prediction: str | None) -> bool | None:
    """The published scripts' verdict: None (skipped) when there is no prediction, else the raw match."""
    if prediction is None or sample.meta.get("unscorable"):
        return None
    return string_match(sample.answer, prediction, sample.choices)

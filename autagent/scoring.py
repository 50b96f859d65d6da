"""MMAU / MMAR string-match scoring, with one deliberate change: a missing prediction is wrong.

The official scripts skip samples whose prediction is missing or unparseable, which inflates
accuracy; here such a sample counts, and counts as incorrect.
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


def is_correct(sample, prediction: str | None) -> bool:
    return string_match(sample.answer, prediction, sample.choices)

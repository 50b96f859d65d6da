"""The reasoner prompts (after the paper's appendix): a baseline prompt without tools and a
tool-augmented prompt that adds the selected tools' JSON records."""
from __future__ import annotations

import json

BASELINE = (
    "Listen to the audio and answer the multiple-choice question.\n"
    "Question: {question}\n"
    "Choices:\n{choices}\n"
    "Answer with the exact text of one choice and nothing else."
)

WITH_TOOLS = (
    "Listen to the audio and answer the multiple-choice question.\n"
    "The following outputs of acoustic analysis tools were computed on the same audio. They may be "
    "useful, irrelevant or wrong; use them only where they help.\n"
    "Tool outputs (JSON):\n{records}\n"
    "Question: {question}\n"
    "Choices:\n{choices}\n"
    "Answer with the exact text of one choice and nothing else."
)


def format_choices(choices) -> str:
    return "\n".join(f"({chr(ord('A') + i)}) {c}" for i, c in enumerate(choices))


def shown(record: dict) -> dict:
    """A record as a reasoner sees it: the tool and its output in the paper's Appendix B shape
    (the cache keeps the structured form)."""
    from tools import get_tool

    try:
        present = get_tool(record["tool"]).present
    except KeyError:
        present = None
    output = record.get("output")
    return {"tool": record["tool"], "output": present(output) if present and output is not None else output}


def render(question: str, choices, records: list[dict] | None) -> str:
    """The prompt text for one question; ``records`` None or empty gives the baseline prompt."""
    if not records:
        return BASELINE.format(question=question, choices=format_choices(choices))
    shown_records = [shown(r) for r in records if "error" not in r]
    return WITH_TOOLS.format(records=json.dumps(shown_records, ensure_ascii=False), question=question,
                             choices=format_choices(choices))


def match_choice(text: str | None, choices) -> str | None:
    """Map a free-text reply to a choice: an exact choice, its label ("(B)", "B."), or the one choice it contains."""
    from ..scoring import resolve_reply

    if text is None:
        return None
    reply = resolve_reply(text, choices).strip().strip(".").strip()
    for choice in choices:
        if reply.lower() == choice.lower():
            return choice
    contained = [c for c in choices if c.lower() in reply.lower()]
    return contained[0] if len(contained) == 1 else None

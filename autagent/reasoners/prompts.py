"""The reasoner prompts (after the paper's appendix): a baseline prompt without tools and a
tool-augmented prompt that adds the selected tools' JSON records."""

from __future__ import annotations

import json

from tools import get_tool

BASELINE = (
    "Listen to the audio and answer the multiple-choice question.\n"
    "Question: {question}\n"
    "Choices:\n{choices}\n"
    "Answer with the exact text of one choice and nothing else."
)

RECORDS_HEADER = (
    "The following outputs of acoustic analysis tools were computed on the same audio. They may be "
    "useful, irrelevant or wrong; use them only where they help.\n"
    "Tool outputs (JSON):\n"
)
"""What precedes the records wherever they are shown: in the prompt below, and in a user's own
chat message augmented by a plugin (:mod:`autagent.reasoners.messages`)."""

WITH_TOOLS = (
    "Listen to the audio and answer the multiple-choice question.\n"
    "{records_block}"
    "Question: {question}\n"
    "Choices:\n{choices}\n"
    "Answer with the exact text of one choice and nothing else."
)


def format_choices(choices) -> str:
    return "\n".join(f"({chr(ord('A') + i)}) {c}" for i, c in enumerate(choices))


def shown(record: dict) -> dict:
    """A record as a reasoner sees it: the tool and its output in the paper's Appendix B shape
    (the cache keeps the structured form)."""
    try:
        present = get_tool(record["tool"]).present
    except KeyError:
        present = None
    output = record.get("output")
    if record.get("presented"):  # read back from a prompt: already in the shape a reasoner sees
        return {"tool": record["tool"], "output": output}
    return {"tool": record["tool"], "output": present(output) if present and output is not None else output}


def records_block(records: list[dict]) -> str:
    """The records as every reasoner is shown them: the header, then one line of JSON in the paper's
    shapes (error records left out)."""
    shown_records = [shown(r) for r in records if "error" not in r]
    return RECORDS_HEADER + json.dumps(shown_records, ensure_ascii=False) + "\n"


def render(question: str, choices, records: list[dict] | None) -> str:
    """The prompt text for one question; ``records`` None or empty gives the baseline prompt."""
    if not records:
        return BASELINE.format(question=question, choices=format_choices(choices))
    return WITH_TOOLS.format(records_block=records_block(records), question=question, choices=format_choices(choices))

"""The agent prompt, the parser of its answers, and the grammar of a valid answer.

Tools are shown anonymised, in the run's order, as ``(A) type1: <description>`` (letters while
there are letters).  The parser is tolerant of how an LM shown that list writes its choice:
indices, letters or ``typeN`` in any case, separated by commas or spaces, inside ``<answer>`` in
any case; the last tag wins; ``none`` (or an empty tag) is the empty set.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from tools import get_tool

AGENT_PROMPT = (
    "You will hear an audio clip and read a question about it. Another model will answer the question; "
    "before it does, you may call acoustic analysis tools on the clip. Their outputs will be shown to it.\n"
    "Available tools:\n{tools}\n"
    "Question: {question}\n"
    "Think about which tools (if any) give information needed for this question. Calling unnecessary tools "
    "adds noise. Reply with the numbers of the chosen tools inside <answer></answer>, for example "
    "<answer>1,3</answer>, or <answer></answer> to call none."
)
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
LETTERS = string.ascii_uppercase


def tool_list(tool_ids) -> str:
    """The run's tools anonymised as type1..typeN (with letters while there are letters) and their descriptions."""
    rows = []
    for i, t in enumerate(tool_ids):
        letter = f"({LETTERS[i]}) " if i < len(LETTERS) else ""
        rows.append(f"{letter}type{i + 1}: {get_tool(t).description}")
    return "\n".join(rows)


def agent_prompt(question: str, tool_ids) -> str:
    return AGENT_PROMPT.format(tools=tool_list(tool_ids), question=question)


@dataclass(frozen=True)
class Selection:
    tools: tuple[str, ...]
    valid: bool
    reason: str = ""


def parse_selection(text: str | None, tool_ids) -> Selection:
    """The tools a completion selects.  Valid: indices (1-based), letters, ``typeN``, any case, commas
    or spaces; ``none`` or an empty tag for no tool; the last ``<answer>`` tag wins.  Invalid (no
    tool called, ``reason`` says why): no tag, junk, or a number or letter outside the list."""
    tool_ids = tuple(tool_ids)
    if not text:
        return Selection((), False, "empty completion")
    found = ANSWER_TAG.findall(text)
    if not found:
        return Selection((), False, "no <answer> tag")
    body = found[-1].strip().strip(".")
    if not body or body.lower() in ("none", "no tools", "no tool", "nothing"):
        return Selection((), True)
    chosen = []
    for part in (p for p in re.split(r"[,\s;]+|\band\b", body, flags=re.IGNORECASE) if p):
        token = part.strip("()[]").lower()
        match = re.fullmatch(r"(?:type)?(\d+)", token)
        if match:
            index = int(match.group(1)) - 1
        elif len(token) == 1 and token.isalpha():
            index = LETTERS.index(token.upper())
        else:
            return Selection((), False, f"not a list of tools: {body[:60]!r}")
        if not 0 <= index < len(tool_ids):
            return Selection((), False, f"tool out of range 1..{len(tool_ids)}: {body[:60]!r}")
        chosen.append(index)
    return Selection(tuple(tool_ids[i] for i in sorted(set(chosen))), True)


class AnswerGrammar:
    """Valid completions: ``<answer>`` + distinct indices in 1..N separated by commas + ``</answer>``.

    As ``prefix_allowed_tokens_fn`` it restricts ``generate``; :meth:`allowed` gives the same set for
    any prefix, so the log-probability passes can apply exactly the mask sampling used.  Candidate
    tokens are the vocabulary entries made only of the grammar's characters.
    """

    def __init__(self, tokenizer, prompt_length: int, num_tools: int):
        self.tokenizer = tokenizer
        self.prompt_length = prompt_length
        self.num_tools = num_tools
        alphabet = set("<answer>/,") | set(string.digits)
        self.candidates = {}
        for token_id in range(len(tokenizer)):
            piece = tokenizer.decode([token_id])
            if piece and set(piece) <= alphabet:
                self.candidates[token_id] = piece
        self.eos = tokenizer.eos_token_id

    def is_prefix(self, text: str) -> bool:
        head = "<answer>"
        if len(text) <= len(head):
            return head.startswith(text)
        if not text.startswith(head):
            return False
        body = text[len(head) :]
        end = body.find("<")
        numbers, tail = (body, "") if end < 0 else (body[:end], body[end:])
        if not re.fullmatch(r"(?:\d+(?:,\d+)*,?)?", numbers):
            return False
        parts = [p for p in numbers.split(",") if p]
        complete = parts if (numbers.endswith(",") or tail) else parts[:-1]
        if any(p.startswith("0") or not 1 <= int(p) <= self.num_tools for p in complete):
            return False
        if parts and not numbers.endswith(",") and not tail:  # a number being written: some completion must fit
            last = parts[-1]
            if last.startswith("0") or not any(str(k).startswith(last) for k in range(1, self.num_tools + 1)):
                return False
        if len(set(parts)) != len(parts) or (numbers.endswith(",") and tail):
            return False
        return "</answer>".startswith(tail)

    def allowed(self, completion_ids) -> list[int]:
        """Token ids allowed after ``completion_ids`` (the tokens generated so far)."""
        text = self.tokenizer.decode(list(completion_ids), skip_special_tokens=True)
        if text.endswith("</answer>") and parse_selection(text, range(self.num_tools)).valid:
            return [self.eos]
        allowed = [t for t, piece in self.candidates.items() if self.is_prefix(text + piece)]
        return allowed or [self.eos]

    def __call__(self, batch_id: int, input_ids) -> list[int]:
        return self.allowed(input_ids[self.prompt_length :].tolist())

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

    ``given``: the part of the answer the prompt already holds (a text policy's reply starts with
    ``<answer>``), read in front of every completion.  ``max_new``: the completion's token budget
    (``policy.lm.max_completion_length``); with it a token is allowed only if the answer can still be
    closed within the tokens left, so every completion sampled under the mask parses (without it a
    long list runs out of tokens before ``</answer>`` and calls no tool).
    """

    def __init__(self, tokenizer, prompt_length: int, num_tools: int, given: str = "", max_new: int | None = None):
        self.tokenizer = tokenizer
        self.prompt_length = prompt_length
        self.num_tools = num_tools
        self.given = given
        self.max_new = max_new
        alphabet = set("<answer>/,") | set(string.digits)
        self.candidates = {}
        for token_id in range(len(tokenizer)):
            piece = tokenizer.decode([token_id])
            if piece and set(piece) <= alphabet:
                self.candidates[token_id] = piece
        self.pieces = set(self.candidates.values())
        self.eos = tokenizer.eos_token_id
        self._allowed: dict[tuple[str, int | None], list[int]] = {}  # memo: the same prefixes recur in every group
        if max_new is not None and self.closing_cost(given) > max_new:
            raise ValueError(
                f"policy.lm.max_completion_length {max_new} cannot hold the shortest answer "
                f"({self.closing_cost(given)} tokens after {given!r})"
            )

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

    def closing_cost(self, text: str) -> float:
        """The fewest candidate tokens that turn ``text`` (a valid prefix) into a whole answer; inf when none do."""
        head, close = "<answer>", "</answer>"
        if len(text) < len(head):
            return self.tokens_for(head[len(text) :] + close)
        body = text[len(head) :]
        end = body.find("<")
        numbers, tail = (body, "") if end < 0 else (body[:end], body[end:])
        if tail:
            return self.tokens_for(close[len(tail) :])
        parts = [p for p in numbers.split(",") if p]
        if numbers and not numbers.endswith(",") and 1 <= int(parts[-1]) <= self.num_tools:
            return self.tokens_for(close)  # the number being written is whole
        if numbers and not numbers.endswith(","):
            endings = [str(k)[len(parts[-1]) :] for k in range(1, self.num_tools + 1) if str(k).startswith(parts[-1])]
        else:
            endings = [str(k) for k in range(1, self.num_tools + 1) if str(k) not in parts] if numbers else [""]
        return min((self.tokens_for(e + close) for e in endings), default=float("inf"))

    def tokens_for(self, text: str) -> float:
        """The fewest candidate tokens that spell ``text`` exactly (inf when they cannot)."""
        best = [0.0] + [float("inf")] * len(text)
        for j in range(1, len(text) + 1):
            best[j] = min((best[i] + 1 for i in range(j) if text[i:j] in self.pieces), default=float("inf"))
        return best[-1]

    def allowed(self, completion_ids) -> list[int]:
        """Token ids allowed after ``completion_ids`` (the tokens generated so far)."""
        text = self.given + self.tokenizer.decode(list(completion_ids), skip_special_tokens=True)
        left = None if self.max_new is None else self.max_new - len(completion_ids) - 1  # after the next token
        key = (text, left)
        if key not in self._allowed:
            self._allowed[key] = self._allowed_after(text, left)
        return self._allowed[key]

    def _allowed_after(self, text: str, left: int | None) -> list[int]:
        if text.endswith("</answer>") and parse_selection(text, range(self.num_tools)).valid:
            return [self.eos]
        allowed = [
            t
            for t, piece in self.candidates.items()
            if self.is_prefix(text + piece) and (left is None or self.closing_cost(text + piece) <= left)
        ]
        return allowed or [self.eos]

    def __call__(self, batch_id: int, input_ids) -> list[int]:
        return self.allowed(input_ids[self.prompt_length :].tolist())

"""A model that calls tools itself, written in the open: the stand-in for a tool-calling audio LM
(Audio-Maestro's loop) where no model that runs here calls functions.

It speaks the OpenAI chat-completions protocol with tools (:meth:`ScriptedCaller.complete`): given a
conversation with a clip, a multiple-choice question, the records shown so far and the function
tools offered, it either asks for one tool or answers.  Its policy, in full:

1. no record shown yet: ask for the offered tool whose description is most like the question
   (MiniLM cosine, at least ``match_floor``; the zero-shot Tools-with-Descriptions rule, one tool);
2. records shown: if they *settle the choices* (one choice agrees with a fact of some record at least
   ``settle_agreement``, by ``settle_lead`` more than any other choice does; the reader's own
   agreement measure, :meth:`EmbeddedReasoner.matches`), answer; otherwise ask for the next tool by
   the same rule;
3. at most ``max_calls`` tools per conversation, never one twice; then, or when no tool is offered or
   none is similar enough, answer.

The answer is the wrapped reasoner's (the embedded reasoner's, through its answer cache) given the
clip, the question and every record shown.  Nothing here was tuned on a test split.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data.sample import Sample
from .base import CachedReasoner
from .messages import BadRequest
from .reading import read_symbols
from .tool_messages import Conversation, read_conversation


@dataclass
class ScriptedCallerConfig:
    """The scripted caller's policy (see :mod:`autagent.reasoners.scripted`)."""

    max_calls: int = 2
    """Tools it asks for in one conversation at most, one per round."""
    match_floor: float = 0.15
    """It asks only for a tool whose description is at least this similar to the question (the
    Tools-with-Descriptions baseline's floor)."""
    settle_agreement: float = 0.5
    """Records settle the choices when one choice agrees with one of their facts at least this well..."""
    settle_lead: float = 0.15
    """...and by this much more than every other choice does."""

    def __post_init__(self):
        if self.max_calls < 0 or not 0 <= self.settle_agreement <= 1 or self.settle_lead < 0:
            raise ValueError("scripted caller: max_calls >= 0, settle_agreement in [0, 1], settle_lead >= 0")


class ScriptedError(RuntimeError):
    """The wrapped reasoner could not answer (its error, named)."""


def offered_functions(body: dict) -> dict[str, str]:
    """Function name -> description of the tools a request offers."""
    offered = {}
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            offered[function["name"]] = str(function.get("description") or function["name"])
    return offered


def completion(model: str, message: dict, finish: str) -> dict:
    """A chat completion holding ``message``."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


class ScriptedCaller:
    name = "scripted"

    def __init__(
        self,
        reasoner: CachedReasoner,
        config: ScriptedCallerConfig | None = None,
        audio_dir: str | Path = ".cache/chat-audio",
        max_audio_bytes: int = 25 << 20,
    ):
        reader = getattr(reasoner, "inner", reasoner)
        if not hasattr(reader, "matches"):
            raise ValueError(f"the scripted caller reads records with the embedded reasoner, not {reasoner.name}")
        self.reasoner, self.reader, self.text = reasoner, reader, reader.text
        self.config = config or ScriptedCallerConfig()
        self.audio_dir, self.max_audio_bytes = Path(audio_dir), max_audio_bytes

    @property
    def where(self) -> str:
        return f"scripted caller answering with {getattr(self.reasoner, 'where', self.reasoner.name)}"

    def settled(self, choices, records: list[dict]) -> bool:
        """Do ``records`` settle the choices (one choice agrees with some fact clearly best)?"""
        facts, vecs = [], []
        for record in records:
            if "error" not in record and record.get("output") is not None:
                record_facts, record_vecs = self.reader.facts(record)
                facts += record_facts
                vecs.append(record_vecs)
        if not facts or len(choices) < 2:
            return False
        options = [read_symbols(c) for c in choices]
        agreement = self.reader.matches(options, self.text.encode(options), facts, np.concatenate(vecs)).max(axis=1)
        best, second = np.sort(agreement)[::-1][:2]
        return bool(best >= self.config.settle_agreement and best - second >= self.config.settle_lead)

    def next_tool(self, question: str, offered: dict[str, str], called: list[str]) -> str | None:
        """The offered tool not yet called whose description is most like the question (or None)."""
        names = [n for n in offered if n not in called]
        if not names:
            return None
        similarity = self.text.encode([offered[n] for n in names]) @ self.text.encode([question])[0]
        best = int(np.argmax(similarity))
        return names[best] if similarity[best] >= self.config.match_floor else None

    def decide(self, conversation: Conversation, offered: dict[str, str]) -> str | None:
        """The tool to ask for next, or None to answer."""
        called = [t for t in conversation.called if t in offered]
        if len(conversation.called) >= self.config.max_calls:
            return None
        if conversation.records and self.settled(conversation.choices, conversation.records):
            return None
        return self.next_tool(conversation.question, offered, called)

    def answer(self, conversation: Conversation) -> str:
        if len(conversation.choices) < 2:
            raise BadRequest("the scripted caller answers multiple-choice questions: give at least two choices")
        sample = Sample("scripted", conversation.audio, conversation.question, conversation.choices, "")
        (reply,) = self.reasoner.ask([(sample, conversation.records or None)])
        if reply.error:
            raise ScriptedError(f"{self.where}: {reply.error}")
        return reply.text or ""

    def complete(self, body: dict) -> dict:
        """The reply to a chat-completions request: one tool call, or the answer."""
        conversation = read_conversation(
            body.get("messages"), body.get("choices"), self.audio_dir, self.max_audio_bytes
        )
        if conversation.remote:
            raise BadRequest("the scripted caller takes the clip as input_audio or a data: URL")
        model = str(body.get("model") or self.name)
        tool = self.decide(conversation, offered_functions(body)) if body.get("tool_choice") != "none" else None
        if tool is not None:
            call = {
                "id": f"call_{uuid.uuid4().hex[:16]}",
                "type": "function",
                "function": {"name": tool, "arguments": "{}"},
            }
            return completion(model, {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
        return completion(model, {"role": "assistant", "content": self.answer(conversation)}, "stop")

"""The loop in which the reasoner asks for tools itself (Audio-Maestro's), beside the learned selection.

The upstream model is sent the conversation, with the plugin's selected records already in front of
the clip's message (none for the pure Audio-Maestro baseline, ``agentic_only``), and the remaining
tools as OpenAI function tools.  When it answers with ``tool_calls`` for our tools, they run (through
the same pool and cache as everything else, a window ``{start, end}`` cutting the clip), their
records go back as ``tool`` messages and the model is asked again, for at most ``max_rounds`` rounds
of calls; the last request offers none of our tools.  A client's own ``tools`` are kept beside ours
(theirs win a name clash) and any call to them ends the loop: the reply goes back to the client with
the client's calls exactly as the model wrote them (ours asked beside them are not run and are named
as ``deferred``).  :func:`run_loop` is the loop; ``autagent serve --agentic``
(:mod:`autagent.serve.tool_calls`) and evaluation (:class:`AgenticRun`, ``eval.methods: [agentic,
agentic_only]``) both call it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tools import make_record
from tools.audio import AudioError
from tools.clip_window import Window, WindowError
from tools.registry import function_tools

from ..data.sample import Sample
from .json_limits import TooDeep, loads
from .openai_compat import OpenAIReasoner, client, failure_name
from .prompts import format_choices, records_block
from .scripted import ScriptedCaller, ScriptedCallerConfig
from .tool_messages import tool_message

QUESTION = (
    "Question: {question}\nChoices:\n{choices}\n"
    "Listen to the audio and answer with the exact text of one choice and nothing else. You may first call "
    "the acoustic analysis tools you are offered."
)
"""The user's text in evaluation (after the selected records, when there are any)."""


@dataclass
class AgenticConfig:
    """The loop in evaluation (``eval.agentic``); ``autagent serve`` takes ``--max-tool-rounds``."""

    max_rounds: int = 3
    """Rounds of tool calls at most; the request after the last one offers no tool of ours."""
    caller: str = "auto"
    """Who asks for tools: ``scripted`` (the open stand-in, answering with the run's embedded reasoner),
    ``endpoint`` (the reasoner's own OpenAI-compatible endpoint, ``reasoner.kind: openai``: a real model
    decides), or ``auto`` (endpoint for an openai reasoner, scripted otherwise)."""
    scripted: ScriptedCallerConfig = field(default_factory=ScriptedCallerConfig)
    """The scripted caller's policy."""
    audio_dir: str = ".cache/chat-audio"
    """Where the scripted caller keeps the clips it is sent, named by content."""

    def __post_init__(self):
        if self.max_rounds < 0:
            raise ValueError(f"eval.agentic.max_rounds must be >= 0, got {self.max_rounds}")
        if self.caller not in ("auto", "scripted", "endpoint"):
            raise ValueError(f"eval.agentic.caller must be auto, scripted or endpoint, got {self.caller!r}")


@dataclass
class Call:
    """One tool call the loop ran."""

    id: str
    tool: str
    round: int
    seconds: float = 0.0
    window: dict | None = None
    error: str | None = None

    def as_dict(self) -> dict:
        row = {"tool": self.tool, "round": self.round, "seconds": round(self.seconds, 4)}
        return row | ({"window": self.window} if self.window else {}) | ({"error": self.error} if self.error else {})


@dataclass
class Outcome:
    """What the loop ended with."""

    reply: dict
    """The last completion: the answer, or the client's own tool calls."""
    calls: list[Call] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    """The records our calls gave back, in order."""
    rounds: int = 0
    """Requests sent upstream."""
    deferred: list[str] = field(default_factory=list)
    """Our tools asked for beside the client's: not run (the client's calls end the loop)."""
    stopped: list[str] = field(default_factory=list)
    """Our tools asked for after the last round: not run."""
    unknown: list[str] = field(default_factory=list)
    """Tools asked for that nobody offered: dropped from the reply."""

    def info(self) -> dict:
        """The part of the reply's ``autagent`` block that says what the loop did."""
        block = {"calls": [c.as_dict() for c in self.calls], "rounds": self.rounds}
        return (
            block
            | ({"deferred": self.deferred} if self.deferred else {})
            | ({"stopped": self.stopped} if self.stopped else {})
            | ({"unknown": self.unknown} if self.unknown else {})
        )


RunCalls = Callable[[list[tuple[str, Window | None]]], Awaitable[list[tuple[dict, float]]]]
"""Runs ``(tool, window)`` requests; returns each one's record and seconds."""


def _name(call) -> str | None:
    function = call.get("function") if isinstance(call, dict) else None
    return function.get("name") if isinstance(function, dict) else None


def message_of(reply: dict) -> dict:
    """The assistant message of a completion; ValueError when the reply is not one."""
    try:
        message = reply["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("the reply is not a chat completion (no choices[0].message)") from None
    if not isinstance(message, dict):
        raise ValueError("the reply's message is not an object")
    return message


def _with_calls(reply: dict, calls: list) -> dict:
    """``reply`` with its message's tool calls replaced by ``calls`` (none: an answer)."""
    message = {k: v for k, v in message_of(reply).items() if k != "tool_calls"}
    if calls:
        message["tool_calls"] = calls
    choice = {**reply["choices"][0], "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    return {**reply, "choices": [choice, *reply["choices"][1:]]}


def _request(call) -> tuple[Window | None, str | None]:
    """The window a call asks for, or the reason its arguments are refused."""
    arguments = (call.get("function") or {}).get("arguments")
    try:
        parsed = loads(arguments) if isinstance(arguments, str) and arguments.strip() else arguments or {}
        return Window.from_arguments(parsed), None
    except TooDeep as err:
        return None, f"the arguments are {err}"
    except json.JSONDecodeError:
        return None, f"the arguments are not JSON: {str(arguments)[:200]!r}"
    except WindowError as err:
        return None, str(err)


async def run_loop(
    ask: Callable[[dict], Awaitable[dict]],
    body: dict,
    ours: list[str],
    run_calls: RunCalls,
    max_rounds: int,
    max_calls: int | None = None,
) -> Outcome:
    """Ask ``ask`` (an upstream's chat completion) with ``body`` and our tools ``ours`` offered beside the
    client's; run the calls to ours with ``run_calls`` and ask again, up to ``max_rounds`` rounds, at
    most ``max_calls`` calls of ours a round (the rest are answered as refused).  A call to a tool
    nobody offered is dropped (named in ``unknown``), never passed on to the client as its own."""
    client_tools = list(body.get("tools") or [])
    theirs = {_name(t) for t in client_tools}
    ours = [t for t in ours if t not in theirs]
    mine_set = set(ours)
    messages = list(body["messages"])
    outcome = Outcome(reply={})
    for round_ in range(1, max_rounds + 2):
        offered = client_tools + (function_tools(ours) if round_ <= max_rounds else [])
        request = {k: v for k, v in body.items() if k not in ("tools", "tool_choice")} | {"messages": messages}
        if offered:
            request["tools"] = offered
            if "tool_choice" in body:  # a forced choice holds for the first request only
                request["tool_choice"] = body["tool_choice"] if round_ == 1 else "auto"
        reply = await ask(request)
        outcome.rounds += 1
        asked = message_of(reply).get("tool_calls") or []
        asked = asked if isinstance(asked, list) else []
        requested = [c for c in asked if _name(c) in mine_set or _name(c) in theirs]
        outcome.unknown += [str(_name(c))[:100] for c in asked if c not in requested]
        if len(requested) < len(asked):
            reply = _with_calls(reply, requested)
        mine = [c for c in requested if _name(c) in mine_set]
        if not requested or len(mine) < len(requested) or round_ > max_rounds:
            outcome.deferred = [_name(c) for c in mine] if len(mine) < len(requested) else []
            outcome.stopped = [_name(c) for c in mine] if len(mine) == len(requested) else []
            outcome.reply = _with_calls(reply, [c for c in requested if c not in mine]) if mine else reply
            return outcome
        for call in mine:
            if not isinstance(call.get("id"), str) or not call["id"]:
                call["id"] = f"call_{uuid.uuid4().hex[:16]}"
        message = message_of(reply)
        messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": mine})
        cap = f"over the cap of {max_calls} tool calls a round: not run"
        parsed = [_request(c) if max_calls is None or k < max_calls else (None, cap) for k, c in enumerate(mine)]
        runnable = [(_name(c), window) for c, (window, problem) in zip(mine, parsed) if problem is None]
        done = iter(await run_calls(runnable) if runnable else [])
        for call, (_, problem) in zip(mine, parsed):
            record, seconds = (make_record(_name(call), "", "", error=problem), 0.0) if problem else next(done)
            outcome.calls.append(
                Call(call["id"], _name(call), round_, seconds, record.get("window"), record.get("error"))
            )
            if "error" not in record:
                outcome.records.append(record)
            messages.append(tool_message(call["id"], record))
    raise AssertionError("unreachable: the last round offers no tool of ours")


# -- evaluation ----------------------------------------------------------------------------------


@dataclass
class ItemResult:
    """One evaluation item through the loop."""

    tools: tuple[str, ...]
    """Tools whose records the model saw: the selection's, then its own calls'."""
    prediction: str | None
    error: str | None
    rounds: int
    calls: list[Call]
    seconds: float


def user_message(audio_part: dict, question: str, choices, records: list[dict] | None) -> dict:
    """An evaluation item as a user message: the clip, the selected records, the question and choices."""
    text = (records_block(records) if records else "") + QUESTION.format(
        question=question, choices=format_choices(choices)
    )
    return {"role": "user", "content": [audio_part, {"type": "text", "text": text}]}


def file_audio_part(path: str) -> dict:
    """The clip's own bytes as an ``input_audio`` part (the scripted caller reads it as sent)."""
    fmt = Path(path).suffix.lstrip(".").lower() or "wav"
    return {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(Path(path).read_bytes()).decode(), "format": fmt},
    }


async def answer_item(caller, sample: Sample, records: dict, selected, tool_ids, max_rounds: int, pool=None):
    """``sample`` through the loop: ``selected`` tools' records in front, the others offered."""
    started = time.perf_counter()
    shown = [records[t] for t in selected if "error" not in records[t]]

    async def run_calls(requests):
        out = []
        for tool, window in requests:
            t0 = time.perf_counter()
            if window is None or pool is None:
                record = records.get(tool) if window is None else None
                record = record or make_record(tool, "", "", error="windows need the tool pool")
            else:
                record = (await asyncio.to_thread(pool.run, sample.audio, [tool], window))[tool]
            out.append((record, time.perf_counter() - t0))
        return out

    try:
        body = {"messages": [user_message(caller.audio_part(sample.audio), sample.question, sample.choices, shown)]}
        ours = [t for t in tool_ids if t not in selected]
        outcome = await run_loop(caller.complete, body, ours, run_calls, max_rounds)
        text = message_of(outcome.reply).get("content")
        problem = f"asked for {outcome.stopped} after the last round" if outcome.stopped and not text else None
    except (AudioError, OSError, ValueError, RuntimeError) as err:
        return ItemResult(tuple(selected), None, f"{type(err).__name__}: {err}", 0, [], time.perf_counter() - started)
    called = tuple(c.tool for c in outcome.calls if c.error is None)
    text = text.strip() if isinstance(text, str) and text.strip() else None
    return ItemResult(
        tuple(selected) + called, text, problem, outcome.rounds, outcome.calls, time.perf_counter() - started
    )


@dataclass
class AgenticRun:
    """The loop as evaluation runs it: who asks for tools, for how many rounds, and the pool that
    serves a call naming a window (every whole-clip record is already computed)."""

    caller: object
    max_rounds: int = 3
    pool: object | None = None
    concurrency: int = 1

    def run(self, samples: list[Sample], records: dict, subsets, tool_ids) -> list[ItemResult]:
        """Every sample through the loop, ``concurrency`` at a time; an unscorable row is an error."""
        caller = self.caller

        async def every():
            gate = asyncio.Semaphore(self.concurrency)

            async def one(sample, subset):
                if sample.meta.get("unscorable"):
                    return ItemResult((), None, f"unscorable row: {sample.meta['unscorable']}", 0, [], 0.0)
                async with gate:
                    subset = tuple(subset or ())
                    return await answer_item(
                        caller, sample, records[sample.id], subset, tool_ids, self.max_rounds, self.pool
                    )

            try:
                return await asyncio.gather(*(one(s, z) for s, z in zip(samples, subsets)))
            finally:
                close = getattr(caller, "aclose", None)
                if close is not None:
                    await close()

        return list(asyncio.run(every()))


class ScriptedEvalCaller:
    """The scripted caller in evaluation: the clip's own bytes, answered in this process."""

    def __init__(self, caller):
        self.caller, self.name = caller, f"scripted ({caller.reasoner.name})"

    audio_part = staticmethod(file_audio_part)

    async def complete(self, body: dict) -> dict:
        return self.caller.complete(body)


class EndpointCaller:
    """A real model behind an OpenAI-compatible endpoint (``reasoner.openai``) decides which tools to call."""

    ANSWER_TOKENS = 256
    """Room for a tool call's JSON; at least the reasoner's own ``max_tokens``."""

    def __init__(self, config):
        self.config, self.name = config, f"endpoint {config.base_url} (model {config.model})"
        self.reasoner = OpenAIReasoner(config)
        self.client = None

    def audio_part(self, path: str) -> dict:
        return self.reasoner.audio_part(path)

    async def complete(self, body: dict) -> dict:
        import openai

        config = self.config
        if self.client is None:  # made inside the event loop that uses it
            self.client = client(config.base_url, config.api_key_env, config.max_retries, config.timeout_s)
        payload = {
            "model": config.model,
            "temperature": config.temperature,
            "max_tokens": max(config.max_tokens, self.ANSWER_TOKENS),
            **body,
        }
        try:
            raw = await self.client.chat.completions.with_raw_response.create(**payload)
            return json.loads(raw.http_response.text)
        except openai.APIError as err:
            raise RuntimeError(f"{self.name}: {failure_name(err)}") from None

    async def aclose(self) -> None:
        """Close the client (each evaluation's event loop makes its own)."""
        if self.client is not None:
            await self.client.close()
            self.client = None


def build_caller(agentic: AgenticConfig, reasoner_config, reasoner):
    """The model that asks for tools in evaluation (see :attr:`AgenticConfig.caller`)."""
    kind = agentic.caller
    if kind == "auto":
        kind = "endpoint" if reasoner_config.kind == "openai" else "scripted"
    if kind == "endpoint":
        if reasoner_config.kind != "openai":
            raise ValueError(f"eval.agentic.caller endpoint needs reasoner.kind openai, not {reasoner_config.kind}")
        return EndpointCaller(reasoner_config.openai)
    if reasoner_config.kind != "embedded":
        raise ValueError(
            f"eval.agentic: the scripted caller reads records with the embedded reasoner, not {reasoner_config.kind}; "
            "for a real model that calls tools use reasoner.kind openai (eval.agentic.caller endpoint)"
        )

    return ScriptedEvalCaller(ScriptedCaller(reasoner, agentic.scripted, agentic.audio_dir))

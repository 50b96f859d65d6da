"""The HTTP side of tool calls (``autagent serve --agentic``): the upstream model may ask for tools
itself, in the loop of :mod:`autagent.reasoners.tool_loop`.

Per request: the conversation's clip is its last user message carrying audio (the anchor); the plugin
selects for the anchor's question once per clip (a later turn of the same conversation finds the
selection in a bounded memo and does not select again), the selected records go in front of the
anchor's text, and every other tool of the plugin (or of the run's library, without a plugin: the
pure Audio-Maestro set-up) is offered as a function tool.  Calls run through the same pool and cache
as the selection's records, one request at a time beside selection.  The reply's ``autagent`` block
lists the selection, every call (tool, round, seconds, window) and the rounds; a client's own tools
and their calls pass through untouched.  ``--reasoner scripted`` serves the open stand-in for a
model that calls tools (:mod:`autagent.reasoners.scripted`).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import OrderedDict
from pathlib import Path

from fastapi.responses import JSONResponse, StreamingResponse

from ..reasoners.messages import with_records
from ..reasoners.scripted import ScriptedError
from ..reasoners.tool_loop import run_loop
from ..reasoners.tool_messages import anchor_of
from .chat_call import ChatCall
from .limits import Refused
from .upstream import UpstreamError

MAX_SELECTIONS = 4096
"""Selections remembered (clip, question, choices): a later turn about the same clip reuses its own."""


def events(reply: dict):
    """A finished completion as server-sent events (the loop needs whole replies; a client that asked
    for a stream gets the final one as chunks), the ``autagent`` block in the last chunk."""
    message = reply["choices"][0]["message"]
    base = {k: reply.get(k) for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    deltas = [{"role": "assistant", "content": ""}]
    if message.get("content"):
        deltas.append({"content": message["content"]})
    if message.get("tool_calls"):
        deltas.append({"tool_calls": [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]})

    async def lines():
        for delta in deltas:
            yield f"data: {json.dumps(base | {'choices': [{'index': 0, 'delta': delta, 'finish_reason': None}]})}\n\n"
        finish = reply["choices"][0].get("finish_reason") or "stop"
        last = base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
        last |= {"autagent": reply["autagent"]} if reply.get("autagent") else {}
        yield f"data: {json.dumps(last)}\n\n"
        yield "data: [DONE]\n\n"

    return lines()


class AgenticChat:
    """``/v1/chat/completions`` under ``--agentic``."""

    def __init__(self, service):
        self.service, self.options, self.plugin = service, service.options, service.plugin
        self.pool = self.plugin.pool if self.plugin is not None else service.tools
        self.tool_ids = list(self.plugin.tools if self.plugin is not None else self.pool.tool_ids)
        self.selections: OrderedDict = OrderedDict()
        self.memo_lock = threading.Lock()

    def select(self, query) -> tuple[list[str], bool]:
        """The plugin's tools for the clip's question, from the memo when this clip was selected for."""
        key = (Path(query.audio).name, query.question, tuple(query.choices))
        with self.memo_lock:  # requests run in worker threads at once
            if key in self.selections:
                self.selections.move_to_end(key)
                return self.selections[key], True
        tools = self.plugin.select(query.audio, query.question, query.choices)
        with self.memo_lock:
            self.selections[key] = tools
            while len(self.selections) > MAX_SELECTIONS:
                self.selections.popitem(last=False)
        return tools, False

    async def __call__(self, body: dict):
        """The reply (the clip leased in the bounded clips folder while it is answered)."""
        service = self.service
        started = time.perf_counter()
        messages = body["messages"]
        anchor = anchor_of(messages)
        last_user = max(i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user")
        choices = body.get("choices") if anchor == last_user else None
        deadline = self.options.request_timeout_s
        async with service.clip({"messages": [messages[anchor]], "choices": choices}) as (query, _):
            try:  # the rounds, the calls and the upstream's answers, within the request's deadline
                reply = self._reply(body, query, anchor, started, service.metrics, Refused)
                return await asyncio.wait_for(reply, deadline)
            except asyncio.TimeoutError:
                raise Refused(504, f"the request took longer than {deadline:g} s", "timeout_error") from None

    async def _reply(self, body: dict, query, anchor: int, started: float, metrics, refused):
        messages = body["messages"]
        seconds, selected, failed, reused = {}, [], {}, False
        if self.plugin is not None:
            t0 = time.perf_counter()
            selected, reused = await asyncio.to_thread(self.select, query)
            seconds["select"] = time.perf_counter() - t0
        good = []
        if selected:
            t0 = time.perf_counter()
            records = await asyncio.to_thread(self.pool.run, query.audio, selected)
            seconds["tools"] = time.perf_counter() - t0
            failed = {t: r["error"] for t, r in records.items() if "error" in r}
            good = [r for r in records.values() if "error" not in r]
        for stage, value in seconds.items():
            metrics.stage.labels(stage).observe(value)
        for tool in failed:
            metrics.tool_errors.labels(tool).inc()
        upstream_seconds = [0.0]

        async def ask(request):
            t0 = time.perf_counter()
            try:
                return await self.service.upstream.complete(request)
            except UpstreamError as err:
                metrics.upstream_errors.inc()
                if err.status is not None:
                    raise refused(err.status, str(err), "upstream_refused") from None
                raise refused(502, str(err), "upstream_error") from None
            finally:
                upstream_seconds[0] += time.perf_counter() - t0

        async def run_calls(requests):
            out = []
            for tool, window in requests:
                t0 = time.perf_counter()
                record = (await asyncio.to_thread(self.pool.run, query.audio, [tool], window))[tool]
                if "error" in record:
                    metrics.tool_errors.labels(tool).inc()
                out.append((record, time.perf_counter() - t0))
            return out

        shown = with_records(messages, good, anchor) if good else messages
        forward = {k: v for k, v in body.items() if k != "stream"} | {"messages": shown}
        ours = [t for t in self.tool_ids if t not in selected]
        try:
            options = self.options
            outcome = await run_loop(ask, forward, ours, run_calls, options.max_tool_rounds, options.max_tool_calls)
        except ValueError as err:  # the upstream answered something that is not a chat completion
            metrics.upstream_errors.inc()
            raise refused(502, f"the upstream's reply: {err}", "upstream_error") from None
        seconds |= {"upstream": upstream_seconds[0], "calls": sum(c.seconds for c in outcome.calls)}
        seconds["total"] = time.perf_counter() - started
        metrics.stage.labels("upstream").observe(seconds["upstream"])
        metrics.stage.labels("total").observe(seconds["total"])
        metrics.requests.labels("chat", "200").inc()
        info = {
            "tools": selected,
            "tools_failed": failed,
            "plugin": self.plugin.content_hash if self.plugin is not None else None,
            "selection": "reused" if reused else ("new" if self.plugin is not None else "none"),
            **outcome.info(),
            "seconds": {k: round(v, 4) for k, v in seconds.items()},
        }
        reply = {**outcome.reply, "autagent": info}
        used = selected + [c.tool for c in outcome.calls if c.error is None]
        headers = {"X-AutAgent-Tools": ",".join(used)} | (
            {"X-AutAgent-Plugin": info["plugin"]} if info["plugin"] else {}
        )
        if body.get("stream"):
            return StreamingResponse(events(reply), media_type="text/event-stream", headers=headers)
        return JSONResponse(reply, headers=headers)


class ScriptedUpstream:
    """``--reasoner scripted``: the open stand-in for a model that calls tools, in this process."""

    def __init__(self, caller):
        self.caller = caller
        self.lock = threading.Lock()  # the reasoner and its answer cache are not thread-safe

    @property
    def name(self) -> str:
        return "scripted (in process)"

    def _complete(self, body: dict) -> dict:
        with self.lock:
            return self.caller.complete(body)

    async def complete(self, request) -> dict:
        body = request.sent if isinstance(request, ChatCall) else request  # a chat request without --agentic
        try:
            return await asyncio.to_thread(self._complete, body)
        except ScriptedError as err:
            raise UpstreamError(str(err)) from None

    async def stream(self, body: dict):
        reply = await self.complete(body)
        return events(reply)

    async def close(self) -> None:
        await asyncio.to_thread(self.caller.reasoner.close)


__all__ = ["AgenticChat", "ScriptedUpstream", "events"]

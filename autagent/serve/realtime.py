"""``/v1/realtime``: the OpenAI Realtime API (GA events) on ``autagent serve``, text out, so that a voice
client streams the clip while the user speaks and the tools start before the clip ends.

A conversation, as the ``openai`` SDK's ``client.realtime.connect()`` (or any WebSocket client) runs it::

    -> session.update {session: {type: "realtime", output_modalities: ["text"],
                                 audio: {input: {format: {type: "audio/pcm", rate: 24000}}}}}
    <- session.updated
    -> conversation.item.create {item: {type: "message", role: "user",
                                        content: [{type: "input_text", text: "Question?\\n(A) ...\\n(B) ..."}]}}
    <- conversation.item.added, conversation.item.done
    -> input_audio_buffer.append {audio: <base64 PCM16>}   ...as the user speaks
    -> input_audio_buffer.commit
    <- input_audio_buffer.committed, conversation.item.added
    -> response.create
    <- response.created, response.output_item.added, response.content_part.added,
       response.output_text.delta, response.output_text.done, response.content_part.done,
       response.output_item.done, response.done {response: {..., autagent: {...}}}

The question may come before, during or after the audio (with none by ``response.create``, the
clip's transcript is the question); its text is read as ``/v1/chat/completions`` reads a user's text.
``response.done`` carries the HTTP answer's ``autagent`` block (tools, failed tools, plugin, seconds
per stage) and ``tools_before_commit_share``, how much of the tools' work was done before the commit.
Anything wrong is an ``error`` event (the Realtime API's shape) and the session goes on: a bad event,
audio before ``session.update``, invalid base64, a buffer past its cap (``--max-audio-seconds``), a
second ``response.create`` while one runs, a reasoner that fails (``response.done`` with status
``failed`` too).  A closed socket stops its session's tool work and frees its audio.  At most
``max_realtime_sessions`` sessions at once (more are told so and closed); a session idle for
``realtime_idle_s`` is closed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time

from fastapi import WebSocket

from tools.arriving import ClipTooLong

from ..plugin.stream_session import SessionClosed
from ..reasoners.json_limits import TooDeep, loads
from ..reasoners.messages import BadRequest, question_and_choices
from ..reasoners.tool_loop import message_of
from . import events as ev
from .realtime_turn import Turn, answer_block
from .service import internal_error
from .upstream import UpstreamError

MAX_RATE, MIN_RATE = 48000, 8000
LARGE = 1 << 16
"""An event (or its audio) longer than this is parsed (decoded) in a worker thread, not on the event loop."""


def add_realtime(app, service) -> None:
    """Mount ``/v1/realtime`` on ``app`` (a :class:`~.service.Service`'s)."""
    options, metrics = service.options, service.metrics

    @app.websocket("/v1/realtime")
    async def realtime(socket: WebSocket):
        await socket.accept()
        if service.realtime >= options.max_realtime_sessions:
            metrics.errors.labels("rate_limit_error").inc()
            await socket.send_text(
                json.dumps(
                    ev.error(
                        f"too many realtime sessions (at most {options.max_realtime_sessions}): try again shortly",
                        "session_limit_reached",
                        "rate_limit_error",
                    )
                )
            )
            await socket.close(code=1013)
            return
        service.realtime += 1  # until the session's tool work has stopped, not only its socket
        conversation = Conversation(socket, service, socket.query_params.get("model"))
        try:
            await conversation.run()
        finally:
            turns = conversation.end()
            try:
                await asyncio.shield(asyncio.to_thread(lambda: [turn.join() for turn in turns]))
            finally:
                service.realtime -= 1


class Conversation:
    def __init__(self, socket, service, model: str | None):
        self.socket, self.service, self.options, self.metrics = socket, service, service.options, service.metrics
        self.answer, self.plugin = service.upstream.complete, service.plugin
        self.model = model or "autagent"
        self.session_id = ev.new_id("sess")
        self.rate = 24000
        self.instructions = ""
        self.configured = False
        self.user_text: str | None = None
        self.turn: Turn | None = None
        self.committed: Turn | None = None
        self.responding: asyncio.Task | None = None
        self.last_item: str | None = None
        self.turns: list[Turn] = []
        """Every turn opened (their work is waited for when the session ends)."""

    async def send(self, payload: dict) -> None:
        await self.socket.send_text(json.dumps(payload))

    async def fail(self, message: str, code: str, client_event=None, kind: str = "invalid_request_error") -> None:
        self.metrics.errors.labels(kind).inc()
        event_id = client_event.get("event_id") if isinstance(client_event, dict) else None  # [1], "x": none
        await self.send(ev.error(message, code, kind, event_id if isinstance(event_id, str) else None))

    def config(self) -> dict:
        return ev.session_config(self.session_id, self.model, self.rate, self.instructions)

    async def run(self) -> None:
        from starlette.websockets import WebSocketDisconnect

        await self.send(ev.event("session.created", session=self.config()))
        while True:
            try:
                message = await asyncio.wait_for(self.socket.receive(), timeout=self.options.realtime_idle_s)
            except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
                await self.fail(f"the session was idle for {self.options.realtime_idle_s:g} s: closed", "idle_timeout")
                await self.socket.close(code=1000)
                return
            except WebSocketDisconnect:
                return
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                await self.fail("send JSON text frames (a binary frame is not a Realtime event)", "invalid_event")
                continue
            if len(text) > self.service.max_event_bytes:
                await self.fail(f"the event is over the {self.service.max_event_bytes}-byte limit", "event_too_large")
                continue
            try:  # a large event (a clip's audio) is parsed off the event loop
                payload = loads(text) if len(text) < LARGE else await asyncio.to_thread(loads, text)
            except TooDeep as err:
                await self.fail(f"the event is {err}", "invalid_json")
                continue
            except ValueError:
                await self.fail("the event is not JSON", "invalid_json")
                continue
            try:
                await self.handle(payload)
            except Exception as err:  # noqa: BLE001 - the session and the service go on
                await self.fail(internal_error(err), "server_error", payload, "server_error")

    async def handle(self, payload) -> None:
        kind = payload.get("type") if isinstance(payload, dict) else None
        if not isinstance(kind, str) or kind not in ev.CLIENT_EVENTS:
            known = ", ".join(ev.CLIENT_EVENTS)
            shown = repr(kind)[:60] if isinstance(payload, dict) else f"(the event is a JSON {type(payload).__name__})"
            await self.fail(f"unknown event type {shown}: this service reads {known}", "unknown_event", payload)
            return
        await getattr(self, "on_" + kind.replace(".", "_"))(payload)

    # -- client events ------------------------------------------------------------------------------
    async def on_session_update(self, payload: dict) -> None:
        try:
            rate, instructions = ev.session_settings(payload.get("session"), self.rate, MIN_RATE, MAX_RATE)
        except ev.Invalid as err:
            await self.fail(str(err), err.code, payload)
            return
        if rate != self.rate and self.turn is not None and self.turn.received:
            await self.fail("the audio format cannot change while audio is buffered", "invalid_format", payload)
            return
        self.rate, self.configured = rate, True
        if instructions is not None:
            self.instructions = instructions
        await self.send(ev.event("session.updated", session=self.config()))

    async def on_conversation_item_create(self, payload: dict) -> None:
        item = payload.get("item")
        parts = item.get("content") if isinstance(item, dict) else None
        if not isinstance(item, dict) or item.get("type") != "message" or item.get("role") != "user":
            await self.fail(
                "conversation.item.create takes a user message (type 'message', role 'user')", "invalid_item", payload
            )
            return
        texts = [p.get("text") for p in parts or [] if isinstance(p, dict) and p.get("type") == "input_text"]
        if not texts or not all(isinstance(t, str) for t in texts) or not "".join(texts).strip():
            await self.fail(
                "the user message needs input_text with the question (and its choices)", "invalid_item", payload
            )
            return
        text = "\n".join(texts)
        try:
            question, choices = question_and_choices(text, name="input_text")
        except BadRequest as err:
            await self.fail(str(err), "invalid_item", payload)
            return
        self.user_text = text
        target = self.committed if self.committed is not None and self.responding is None else self.turn
        if target is not None and target.stream is not None:
            target.stream.ask(question, choices)
        item_id = item["id"] if isinstance(item.get("id"), str) and 0 < len(item["id"]) <= 64 else ev.new_id("item")
        added = ev.user_item(item_id, [{"type": "input_text", "text": text}])
        await self.send(ev.event("conversation.item.added", previous_item_id=self.last_item, item=added))
        await self.send(ev.event("conversation.item.done", previous_item_id=self.last_item, item=added))
        self.last_item = item_id

    async def on_input_audio_buffer_append(self, payload: dict) -> None:
        if not self.configured:
            await self.fail(
                "send session.update (session.type 'realtime') before any audio", "session_not_configured", payload
            )
            return
        audio = payload.get("audio") or ""
        try:  # a large chunk is decoded off the event loop
            decode = lambda: base64.b64decode(audio, validate=True)  # noqa: E731
            pcm = decode() if isinstance(audio, str) and len(audio) < LARGE else await asyncio.to_thread(decode)
        except (binascii.Error, ValueError, TypeError):
            await self.fail("input_audio_buffer.append: audio is not valid base64", "invalid_audio", payload)
            return
        if len(pcm) % 2:
            await self.fail(
                "input_audio_buffer.append: 16-bit PCM has an even number of bytes", "invalid_audio", payload
            )
            return
        if self.turn is None:
            self.turn = await asyncio.to_thread(Turn, self.service, self.rate)
            self.turns = [t for t in self.turns if not t.stopped()] + [self.turn]
            if self.user_text is not None and self.turn.stream is not None:
                self.turn.stream.ask(*question_and_choices(self.user_text))
        try:
            self.turn.feed(pcm)
        except ClipTooLong as err:
            await self.fail(
                f"{err}: this chunk was dropped; commit or clear the buffer", "input_audio_buffer_full", payload
            )

    async def on_input_audio_buffer_commit(self, payload: dict) -> None:
        if self.turn is None or not self.turn.received:
            await self.fail(
                "the audio buffer is empty: append audio before committing it",
                "input_audio_buffer_commit_empty",
                payload,
            )
            return
        if self.responding is not None:
            await self.fail(
                "a response is in progress: commit the next clip after response.done",
                "conversation_already_has_active_response",
                payload,
            )
            return
        if self.committed is not None:
            self.committed.close()  # a clip committed but never answered gives way to the new one
        self.committed, self.turn = self.turn, None
        self.committed.committed = True
        if self.committed.stream is not None:
            self.committed.stream.commit()
        item = self.committed.item_id
        await self.send(ev.event("input_audio_buffer.committed", previous_item_id=self.last_item, item_id=item))
        audio = ev.user_item(item, [{"type": "input_audio", "transcript": None}])
        await self.send(ev.event("conversation.item.added", previous_item_id=self.last_item, item=audio))
        self.last_item = item

    async def on_input_audio_buffer_clear(self, payload: dict) -> None:
        if self.turn is not None:
            self.turn.close()
            self.turn = None
        await self.send(ev.event("input_audio_buffer.cleared"))

    async def on_response_create(self, payload: dict) -> None:
        if self.responding is not None:
            await self.fail(
                "a response is already in progress: wait for response.done",
                "conversation_already_has_active_response",
                payload,
            )
            return
        if self.committed is None:
            await self.fail(
                "no committed audio to answer: send input_audio_buffer.commit first", "no_committed_audio", payload
            )
            return
        turn, self.committed = self.committed, None
        self.responding = asyncio.create_task(self.respond(turn, self.user_text))
        self.user_text = None

    # -- the answer ---------------------------------------------------------------------------------
    async def respond(self, turn: Turn, user_text: str | None) -> None:
        from starlette.websockets import WebSocketDisconnect

        try:
            await self._respond(turn, user_text)
        except (WebSocketDisconnect, RuntimeError):  # the client left mid-response: nobody to tell
            pass
        finally:
            turn.close()
            self.responding = None

    async def _respond(self, turn: Turn, user_text: str | None) -> None:
        """Every ``response.create`` ends in ``response.done`` (``failed`` after an ``error`` event when
        anything went wrong: the tools, the upstream, an empty reply), unless the client left."""
        response_id, item_id = ev.new_id("resp"), ev.new_id("item")
        started = time.perf_counter()
        await self.send(ev.event("response.created", response=ev.response(response_id, "in_progress", [])))
        result = None
        try:
            result = await self.result_of(turn)
            messages = result.messages(user_text or result.question)
            if self.instructions:  # the session's instructions, as a system message before the user's
                messages = [{"role": "system", "content": self.instructions}, *messages]
            upstream_started = time.perf_counter()
            reply = await self.answer({"model": self.model, "messages": messages})
            text = message_of(reply).get("content") or ""
            if not isinstance(text, str):
                raise ValueError("the reply's content is not text")
            info = self.autagent(result, time.perf_counter() - upstream_started, time.perf_counter() - started)
        except (asyncio.CancelledError, SessionClosed):
            raise
        except Exception as err:  # noqa: BLE001 - whatever failed, the client gets an error and response.done
            upstream = isinstance(err, UpstreamError | ValueError)
            if isinstance(err, UpstreamError):
                self.metrics.upstream_errors.inc()
            message = str(err) if upstream else internal_error(err)
            await self.fail(message, "response_failed", kind="server_error" if upstream else "invalid_request_error")
            failed = {"type": "failed", "reason": "error", "error": {"type": "server_error", "message": message}}
            await self.send(ev.event("response.done", response=ev.response(response_id, "failed", [], details=failed)))
            return
        finally:
            if result is not None and result.audio:  # the clip was held in the bounded folder until now
                await asyncio.to_thread(self.service.audio_store.release, result.audio)
        for payload in ev.text_events(response_id, item_id, text):
            await self.send(payload)
        done = ev.response(
            response_id, "completed", [ev.assistant_item(item_id, text, "completed")], {"autagent": info}
        )
        await self.send(ev.event("response.done", response=done))
        self.metrics.requests.labels("realtime", "200").inc()
        self.last_item = item_id

    async def result_of(self, turn: Turn):
        """The committed clip's result, its clip held in the service's bounded folder (the caller releases it)."""
        if turn.stream is not None:
            return await asyncio.wrap_future(turn.stream.result())
        store, max_bytes = self.service.audio_store, self.options.max_audio_bytes
        return await asyncio.to_thread(turn.bare_result, store, max_bytes)

    def autagent(self, result, upstream_s: float, total_s: float) -> dict:
        """``response.done``'s ``autagent`` block (:func:`.realtime_turn.answer_block`); each failed tool counted."""
        if self.plugin is None:
            return {}
        for tool in result.failed:
            self.metrics.tool_errors.labels(tool).inc()
        return answer_block(result, self.plugin.content_hash, upstream_s, total_s)

    def end(self) -> list[Turn]:
        """The socket closed: stop the tool work (between one tool and the next) and free the audio;
        the turns whose work may still be running (to wait for)."""
        for turn in self.turns:
            turn.close()
        if self.responding is not None:
            self.responding.cancel()
        self.turn = self.committed = None
        return self.turns

"""What every endpoint of ``autagent serve`` shares: the service's parts (settings, upstream, plugin,
clips folder), its metrics, the admission (counted once a body is whole; a 429 before anything is
read once the service is full), each request's deadline, OpenAI-shaped refusals, and reading a
request's clip (fetched if remote and allowed, checked for size and length, leased in the bounded
clips folder)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi.responses import JSONResponse, StreamingResponse

from tools.audio import AudioError

from ..reasoners.messages import BadRequest, check_format, read_query
from .chat_call import ChatCall, ReadClip
from .errors import ErrorResponse
from .limits import Arriving, AudioStore, Refused, SentClips, body_limit, clip_seconds, read_json
from .options import ServeOptions
from .remote import fetch, format_of


def internal_error(err: BaseException) -> str:
    """What a client is told of a failure of ours: an id to quote, never the message (paths, URLs);
    the traceback goes to the service's log under that id."""
    import logging
    import uuid

    ref = uuid.uuid4().hex[:12]
    logging.getLogger("autagent.serve").error("internal error %s", ref, exc_info=(type(err), err, err.__traceback__))
    return f"internal error (reference {ref} in the service's log)"


class Metrics:
    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter(
            "autagent_requests", "Requests by endpoint and status", ["endpoint", "status"], registry=self.registry
        )
        self.errors = Counter(
            "autagent_request_errors", "Refused or failed requests by kind", ["kind"], registry=self.registry
        )
        self.stage = Histogram(
            "autagent_stage_seconds",
            "Seconds per stage of a request",
            ["stage"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.tool_errors = Counter("autagent_tool_errors", "Tool records that failed", ["tool"], registry=self.registry)
        self.upstream_errors = Counter("autagent_upstream_errors", "Upstream calls that failed", registry=self.registry)
        self.in_flight = Gauge("autagent_in_flight", "Requests being handled or waiting", registry=self.registry)
        self.threads = Gauge(
            "autagent_threads",
            "Threads by pool: work and stream are bounded pools, other is the rest",
            ["pool"],
            registry=self.registry,
        )

    def text(self) -> bytes:
        import threading

        from prometheus_client import generate_latest

        pools = {"work": 0, "stream": 0, "other": 0}
        for thread in threading.enumerate():
            name = thread.name
            if name == "tqdm_monitor":  # tqdm's own singleton, started and stopped with its bars
                continue
            pool = (
                "work"
                if name.startswith("autagent-work")
                else "stream"
                if name.startswith("autagent-stream_")
                else "other"
            )
            pools[pool] += 1
        for pool, count in pools.items():
            self.threads.labels(pool).set(count)
        return generate_latest(self.registry)


@dataclass
class Service:
    """The running service: its settings and parts, and the state its endpoints share."""

    options: ServeOptions
    upstream: object
    """An :class:`~.upstream.OpenAIUpstream`, :class:`~.upstream.LocalReasoner` or scripted caller."""
    plugin: object | None = None
    """A :class:`autagent.api.Plugin` applied in front of the upstream, or None (pass-through)."""
    tools: object | None = None
    """With --agentic and no plugin: the :class:`tools.pool.ToolPool` whose tools are offered."""
    audio_store: AudioStore | None = None
    """The bounded clips folder (shared with a reasoner in process)."""
    tools_max_seconds: float = 30.0
    """How much of a clip the tools hear (the run config's ``tools.max_seconds``)."""
    metrics: Metrics = field(default_factory=Metrics)
    admitted: int = 0
    """Requests being handled or waiting."""
    realtime: int = 0
    """Realtime sessions open, and closed ones whose tool work has not stopped yet."""

    def __post_init__(self):
        if self.audio_store is None:
            self.audio_store = AudioStore(self.options.audio_dir, self.options.audio_cache_bytes)
        self.sent_clips = SentClips()
        self.slots = asyncio.Semaphore(self.options.max_concurrency)
        self._stream_pool = None
        self.max_body = body_limit(self.options.max_audio_bytes)
        self.arriving = Arriving((self.options.max_concurrency + self.options.max_queue) * self.max_body)

    @property
    def max_audio_seconds(self) -> float:
        return self.options.max_audio_seconds or self.tools_max_seconds

    @property
    def max_event_bytes(self) -> int:
        """The largest realtime event: the whole clip's audio (at 48 kHz, 16-bit) in base64, and 64 KiB."""
        return 4 * -(-int(self.max_audio_seconds * 48000 * 2) // 3) + (1 << 16)

    def stream_pool(self):
        """The bounded pool that runs the realtime sessions' tool work (two turns per session at most
        at once: one buffering, one answered; a closed one's stops between tools)."""
        if self._stream_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            workers = 2 * self.options.max_realtime_sessions
            self._stream_pool = ThreadPoolExecutor(workers, thread_name_prefix="autagent-stream")
        return self._stream_pool

    def refuse(self, err: Refused, endpoint: str) -> JSONResponse:
        self.metrics.requests.labels(endpoint, str(err.status)).inc()
        self.metrics.errors.labels(err.kind).inc()
        return ErrorResponse.of(str(err), err.kind, param=err.param).reply(err.status, err.headers)

    async def read_body(self, request) -> dict:
        """The request's JSON object, whole within ``--body-timeout-s`` (a 408 otherwise)."""
        from starlette.requests import ClientDisconnect

        limit = self.options.body_timeout_s
        try:
            return await asyncio.wait_for(read_json(request, self.max_body, self.arriving), limit)
        except asyncio.TimeoutError:
            raise Refused(408, f"the request body did not arrive within {limit:g} s", "timeout_error") from None
        except ClientDisconnect:  # gone before its body was whole: counted, never an internal error
            raise Refused(400, "the client went away before its body was whole", "client_disconnected") from None

    @asynccontextmanager
    async def clip(self, call: ChatCall | dict, then=None):
        """The request's clip (fetched if remote and allowed, checked for size and length), question
        and choices, and what ``then(query)`` gives (the plugin's work on them; None without it), as
        ``(query, result)``; the clip is held in the bounded clips folder until the block ends
        (deleted at once when refused).  ``call`` (a body the service made itself: a dict) keeps the
        query and the clip as read (:class:`.chat_call.ReadClip`), for the upstream call made in the
        block to find the clip in its messages rather than decode it again.  Reading, decoding,
        hashing, storing and checking the clip and ``then`` run in one worker-thread call (a thread
        hop costs about what reading a clip sent before does); such a clip, the same base64 text, is
        not decoded or checked again (:class:`.limits.SentClips`)."""
        call = call if isinstance(call, ChatCall) else ChatCall(call)
        query, result = await self._query(call, then)
        call.query = query
        try:
            yield query, result
        finally:
            self.audio_store.release(query.audio)  # a count; a file deleted only when over the bound

    async def on_clip(self, body: ChatCall | dict, then):
        """``then(query)`` on the request's clip (:meth:`clip`), the clip let go once it returns."""
        async with self.clip(body, then) as (_, result):
            return result

    async def _query(self, call: ChatCall, then):
        options = self.options
        query, result = await self._worker(self._read, call, then)
        if not query.remote:
            return query, result
        if not options.allow_remote_audio:
            raise BadRequest("remote audio URLs are refused (start the service with --allow-remote-audio)")
        url = query.remote["url"]
        raw = await fetch(
            url, options.max_audio_bytes, options.allow_private_audio_hosts, timeout_s=options.remote_timeout_s
        )
        return await self._worker(self._fetched, call, query, raw, format_of(url, raw), then)

    async def _worker(self, read, *args):
        """``read(*args)`` in a worker thread; if the request is cancelled meanwhile (the service
        stopping), the clip it held is let go when it returns."""
        work = asyncio.ensure_future(asyncio.to_thread(read, *args))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            work.add_done_callback(self._let_go)
            raise

    def _let_go(self, work) -> None:
        if not work.cancelled() and work.exception() is None and work.result()[0].audio:
            self.audio_store.release(work.result()[0].audio)

    def _read(self, call: ChatCall, then):
        """(query, ``then(query)``) of a clip sent in the request (a remote one: the query only); the
        clip as read kept in ``call.clip``."""
        from pathlib import Path

        messages = call.body.get("messages")
        choices = call.request.choices if call.request is not None else call.body.get("choices")
        options, store, sent = self.options, self.audio_store, self.sent_clips
        folder, limit = Path(options.audio_dir), options.max_audio_bytes
        hold = lambda raw, fmt: store.hold(raw, fmt, limit)  # noqa: E731
        found = {}

        def known(data: str, fmt: str):
            found["sent"] = (data, fmt)
            key = found["key"] = sent.key(data, fmt)
            hit = found["hit"] = sent.get(key) if key else None
            return hit[:2] if hit else None

        query = read_query(messages, choices, folder, limit, hold, known)
        if query.remote:
            return query, None
        hit = found.get("hit")
        if hit is not None and not store.retake(hit[0]):  # the folder deleted it meanwhile: read it again
            hit, query = None, read_query(messages, choices, folder, limit, hold)
        call.clip = ReadClip(*found["sent"], query.audio, query.audio_bytes)
        return self._checked(query, hit[2] if hit else None, found.get("key"), then)

    def _fetched(self, call: ChatCall, query, raw: bytes, fmt: str, then):
        check_format(raw, fmt)
        query.audio = str(self.audio_store.hold(raw, fmt, self.options.max_audio_bytes))
        query.audio_bytes = len(raw)
        call.clip = ReadClip(None, fmt, query.audio, len(raw), url=query.remote["url"])
        return self._checked(query, None, None, then)

    def _checked(self, query, seconds: float | None, key: str | None, then):
        """The held clip checked (its length ``seconds`` when known), remembered under ``key``, and
        ``then(query)``; a refused clip is deleted, the clip let go if ``then`` fails."""
        store = self.audio_store
        try:
            if seconds is None:
                try:
                    seconds = clip_seconds(query.audio, self.max_audio_seconds, self.tools_max_seconds)
                except AudioError as err:  # its reason and code, never the clips folder's path
                    raise BadRequest(f"the audio cannot be used: {err.reason} ({err.code})") from None
            if seconds > self.max_audio_seconds:
                hint = " (the tools hear at most that)" if self.max_audio_seconds == self.tools_max_seconds else ""
                raise BadRequest(f"the audio is longer than {self.max_audio_seconds:g} s{hint}")
        except BaseException:
            store.release(query.audio, True)  # refused: not kept
            raise
        query.seconds = seconds
        if key is not None:
            self.sent_clips.put(key, query.audio, query.audio_bytes, seconds)
        try:
            return query, then(query) if then is not None else None
        except BaseException:
            store.release(query.audio)
            raise

    async def admit(self, request, handler, endpoint: str):
        """``handler(body)`` once admitted, all within the request's deadline (``--request-timeout-s``
        from its first byte read to its last byte sent: a 504, or a stream cut).  A request counts
        (``admitted``, against ``--max-concurrency`` + ``--max-queue``) once its body is whole: bodies
        still arriving hold no place, so idle sockets that sent one byte lock nobody out (issue 62),
        and are bounded by their own deadline (``--body-timeout-s``) and their bytes together
        (:class:`.limits.Arriving`).  A full service answers 429 before reading anything, and again
        when a body completes with no place left; a streamed reply (:class:`HeldStream`) keeps its
        slot until its last line."""
        options = self.options
        deadline = asyncio.get_running_loop().time() + options.request_timeout_s
        if self.admitted >= options.max_concurrency + options.max_queue:
            return self.refuse(self._full(), endpoint)
        try:
            body = await self.read_body(request)
        except Refused as err:
            return self.refuse(err, endpoint)
        if self.admitted >= options.max_concurrency + options.max_queue:
            return self.refuse(self._full(), endpoint)
        self.admitted += 1
        self.metrics.in_flight.inc()
        released = False

        def release():
            nonlocal released
            if not released:
                released = True
                self.slots.release()
                self.admitted -= 1
                self.metrics.in_flight.dec()

        try:
            async with asyncio.timeout_at(deadline):
                await self.slots.acquire()
        except BaseException as err:
            self.admitted -= 1
            self.metrics.in_flight.dec()
            if isinstance(err, TimeoutError):
                return self.refuse(self._late(), endpoint)
            raise
        response = None
        try:
            async with asyncio.timeout_at(deadline):
                response = await handler(body)
            return response
        except TimeoutError:
            return self.refuse(self._late(), endpoint)
        except Refused as err:
            return self.refuse(err, endpoint)
        except BadRequest as err:
            refused = Refused(400, str(err), "invalid_request_error", param=getattr(err, "param", None))
            return self.refuse(refused, endpoint)
        finally:
            if isinstance(response, HeldStream):
                response.release, response.deadline = release, deadline
            else:
                release()

    @staticmethod
    def _full() -> Refused:
        return Refused(429, "too many requests: try again shortly", "rate_limit_error", {"Retry-After": "1"})

    def _late(self) -> Refused:
        limit = self.options.request_timeout_s
        return Refused(504, f"the request took longer than {limit:g} s (--request-timeout-s)", "timeout_error")


class HeldStream(StreamingResponse):
    """A streamed reply that keeps its request's slot until the stream ends (``release`` is set by
    the admission and called when the last line is sent or the client goes away)."""

    release = None
    deadline = None
    """The request's deadline (the loop's clock): a client that reads too slowly is cut off there."""

    async def __call__(self, scope, receive, send):
        try:
            async with asyncio.timeout_at(self.deadline):
                await super().__call__(scope, receive, send)
        except TimeoutError:  # the response unfinished: the server closes the connection
            pass
        finally:
            if self.release is not None:
                self.release()

"""Requests to an OpenAI-compatible server paced by the speed it is measured to have (issue 63.5).

Why: fixed settings (8 requests at once of 16 prompts, each within 60 s, a timed-out one sent again
at once) fit a GPU server, not vLLM's CPU build on a busy machine, which gets through a few hundred
prompt tokens a second: 8 requests of 16 prompts of 400 tokens are minutes of work, every request
timed out, and each copy sent again queued the same work behind the one the server was still doing
(25 of 40 answers ended in ``Timeout`` after 29 re-sends).  A :class:`Pacer` instead

- **measures the server's speed**: prompt tokens answered over the seconds during which at least one
  request was in flight (recent requests weigh most), a measure that holds whether the server works
  on its requests one after another or all together;
- **sizes each request by it**: at most ``prompts_per_request`` prompts, and no more tokens than the
  requests in flight together get through in a quarter of ``timeout_s``;
- **gives each request a timeout by it**: :data:`SLACK` times what the tokens in flight (its own and
  those sent before it) take at that speed, never less than ``timeout_s`` (also the timeout before any
  speed is known) nor more than ``max_timeout_s``;
- **sets how many requests are in flight as TCP does (AIMD)**: one at the start, one more after a round
  of requests each answered within half of ``timeout_s``, halved when one is slower or times out;
- **after a timeout sends nothing** until every request in flight is answered and the server is done
  with what it was given (a server that goes on with a request whose client has left must not get the
  same work twice): as the server says (``idle``: vLLM's ``/metrics``, no request running or waiting),
  or, from a server that does not say, once it has had the time the abandoned requests' tokens take at
  the speed measured (an estimate: a server slower still may be at work); then sends the abandoned
  prompts again at the new size, each at most ``max_retries`` times more.

A server that answers none of :data:`STUCK_ROUNDS` rounds of requests in a row (each timed out, or
refused a connection the SDK tried again) is stuck or down: what is left is given up, at once rather
than request by request.

The other failures worth a retry (408, 409, 429, 5xx, a dropped or refused connection: the SDK's list)
are sent again after a back-off, ``Retry-After`` where the server gives one (up to a minute), else
0.5, 1, 2... up to 8 s; nothing else is sent meanwhile.  The SDK itself retries nothing: its retries
would run inside one request's timeout.  ``pacing: fixed`` keeps the
configured numbers as they are (a paid API whose rate limit is known) and still never re-sends work
in flight.  The pacer lives as long as its reasoner: what it measured carries over from batch to
batch, and :meth:`Pacer.summary` says what it settled on (the reasoner's ``where``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

from .openai_http import failure_name

log = logging.getLogger(__name__)

SLACK = 3.0
"""A request's timeout is this many times what the tokens ahead of it take at the speed measured: the
speed of a shared machine moves by a factor of two or three between one request and the next."""
STUCK_ROUNDS = 4
"""Rounds of requests unanswered in a row (a round: those sent after the previous failure) after which
the rest is given up."""
POLL_S = 0.5
"""How often a draining pacer asks the server whether it is idle."""
MEMORY = 0.7
"""How much of the speed measured so far each new answer keeps (the rest is the newest request's)."""


class Retry(Exception):
    """Raised by a sender for a reply worth asking again (a 200 whose body is no completion)."""


class Unanswered(RuntimeError):
    """A request given up on; its message is the failure's short name (``Timeout``, ``HTTP 400``...)."""


Send = Callable[[list[int], float], Awaitable[None]]
"""``send(units, timeout)``: one request for ``units``, which records what it got for each of them."""
Fail = Callable[[list[int], str], None]
"""``fail(units, problem)``: ``units`` are given up on, for the reason ``problem``."""


def back_off(err, tries: int) -> float | None:
    """Seconds to wait before sending again what failed with ``err`` (None: not worth another try)."""
    import openai

    if isinstance(err, openai.APIStatusError):
        if err.status_code not in (408, 409, 429) and err.status_code < 500:
            return None
        try:
            after = float(err.response.headers.get("retry-after", ""))
        except ValueError:
            after = -1.0
        if 0 <= after <= 60:
            return after
    elif not isinstance(err, openai.APIConnectionError):
        return None
    return min(0.5 * 2**tries, 8.0)


class Pacer:
    """How many requests at once, how many prompts each and how long each may take (the module's doc)."""

    def __init__(
        self,
        max_concurrency: int,
        prompts_per_request: int,
        timeout_s: float,
        max_timeout_s: float,
        max_retries: int,
        adaptive: bool = True,
    ):
        self.most, self.per_request, self.retries, self.adaptive = (
            max_concurrency,
            prompts_per_request,
            max_retries,
            adaptive,
        )
        self.floor, self.ceiling = timeout_s, max(timeout_s, max_timeout_s)
        self.concurrency = 1 if adaptive else max_concurrency
        self.answered_tokens = self.busy_s = 0.0
        self.in_flight: dict[object, int] = {}  # request -> prompt tokens
        self.mark = 0.0  # the last time the busy seconds were counted up to
        self.fast = 0  # requests answered within half of timeout_s since the concurrency last changed
        self.lowered_at = 0.0  # a request sent before the last decrease does not decrease it again
        self.quiet_until, self.abandoned = 0.0, 0
        self.draining = False
        self.silent, self.last_problem = 0, ""  # rounds unanswered in a row, and why the last one was
        self.last_failure = self.last_timeout = 0.0
        self.counts = {"requests": 0, "prompts": 0, "timeouts": 0, "resent": 0}
        self.idle: Callable[[], Awaitable[bool | None]] | None = None
        """Whether the server has no request running or waiting (None: it does not say); set by the
        reasoner for the client it has open."""
        self.longest = 0.0

    @property
    def speed(self) -> float | None:
        """Prompt tokens a second the server got through, as measured; None before any answer."""
        return self.answered_tokens / self.busy_s if self.answered_tokens > 0 and self.busy_s > 0 else None

    def budget(self) -> float:
        """The most prompt tokens one request may carry: the requests in flight together take a quarter
        of ``timeout_s`` at the speed measured (no bound before the first answer, or with fixed pacing)."""
        speed = self.speed
        if not self.adaptive or speed is None:
            return float("inf")
        return speed * self.floor / 4 / self.concurrency

    def timeout(self, ahead: int) -> float:
        """A request's timeout, with ``ahead`` prompt tokens in flight (its own included)."""
        speed = self.speed
        if not self.adaptive or speed is None or ahead <= 0:
            return self.floor
        return min(max(self.floor, SLACK * ahead / speed), self.ceiling)

    async def one(self, cost: int, call: Callable[[], Awaitable]):
        """``await call()`` as one paced request of ``cost`` prompt tokens, retried as any other: its
        result, or :class:`Unanswered`."""
        out: dict = {}

        async def send(units, timeout):
            out["value"] = await call()

        def fail(units, problem):
            out["problem"] = problem

        await self.run([cost], send, fail, grouped=False)
        if "problem" in out:
            raise Unanswered(out["problem"])
        return out["value"]

    async def run(self, costs: list[int], send: Send, fail: Fail, grouped: bool = True) -> None:
        """Every unit (``costs[i]``: the prompt tokens unit ``i`` puts before the server; 0: no model
        work, a /tokenize) sent, ``grouped`` several to a request, until each is answered or given up
        (``fail``).  An exception other than the server's failures is the caller's (raised here)."""
        pending: deque[tuple[int, int]] = deque((unit, 0) for unit in range(len(costs)))  # (unit, tries)
        running: set[asyncio.Task] = set()
        try:
            while pending or running:
                if self.draining and not running:
                    await self._drain()
                while pending and self._may_send(len(running), free=not any(costs)):
                    chunk = self._take(pending, costs, grouped)
                    running.add(asyncio.create_task(self._request(chunk, costs, send, fail, pending)))
                wait = self.quiet_until - time.monotonic()
                if not running:
                    await asyncio.sleep(max(wait, 0.0))
                    continue
                done, _ = await asyncio.wait(
                    running, timeout=wait if wait > 0 else None, return_when=asyncio.FIRST_COMPLETED
                )
                running -= done
                for task in done:
                    task.result()  # a sender's own bug is raised, not swallowed
                if self.silent >= STUCK_ROUNDS and pending:  # stuck or down: what is left is given up
                    fail([unit for unit, _ in pending], self.last_problem)
                    pending.clear()
        finally:
            for task in running:
                task.cancel()

    def _may_send(self, running: int, free: bool) -> bool:
        """``free``: requests that put no model work on the server (/tokenize) go ``max_concurrency`` at once."""
        if self.draining or time.monotonic() < self.quiet_until:
            return False
        return running < (self.most if free else self.concurrency)

    async def _drain(self) -> None:
        """Wait, with nothing in flight, until the server is done with what it was given: until it says
        so (at most ``max_timeout_s`` after the timeout), or, where it does not say, until the estimate."""
        while self.idle is not None and time.monotonic() < self.last_timeout + self.ceiling:
            said = await self.idle()
            if said is None:
                self.idle = None  # not asked again: the estimate
                break
            if said:
                self.quiet_until = 0.0
                break
            await asyncio.sleep(POLL_S)
        await asyncio.sleep(max(0.0, self.quiet_until - time.monotonic()))
        self.draining, self.abandoned = False, 0

    def _take(self, pending: deque, costs: list[int], grouped: bool) -> list[tuple[int, int]]:
        """The next request's units: the first waiting, then as many more as fit its size and budget."""
        chunk = [pending.popleft()]
        tokens, budget = costs[chunk[0][0]], self.budget()
        while grouped and pending and len(chunk) < self.per_request and tokens + costs[pending[0][0]] <= budget:
            chunk.append(pending.popleft())
            tokens += costs[chunk[-1][0]]
        return chunk

    async def _request(self, chunk, costs, send: Send, fail: Fail, pending: deque) -> None:
        import openai

        units = [unit for unit, _ in chunk]
        tokens, key = sum(costs[u] for u in units), object()
        now = sent = time.monotonic()
        if tokens and not self.in_flight:
            self.mark = now  # the server is busy from now on
        if tokens:
            self.in_flight[key] = tokens
        ahead = sum(self.in_flight.values())
        timeout = self.timeout(ahead)
        self.longest = max(self.longest, timeout)
        if tokens:  # /tokenize requests are not counted: they put no work on the model
            self.counts["requests"] += 1
            self.counts["prompts"] += len(units)
        try:
            async with asyncio.timeout(timeout):
                await send(units, timeout)
        except (TimeoutError, openai.APITimeoutError):
            log.debug("timeout after %.2f s: %d prompts, %d tokens, %d ahead", timeout, len(units), tokens, ahead)
            self._timed_out(key, tokens, ahead, now)
            return self._again(chunk, "Timeout", fail, pending)
        except Retry as err:
            self._returned(key, 0)
            return self._again(chunk, str(err), fail, pending)
        except openai.APIError as err:
            now = self._returned(key, 0)
            if isinstance(err, openai.APIConnectionError):
                self._unanswered(failure_name(err), sent, now)
            delay = back_off(err, max(tries for _, tries in chunk))
            if delay is None:
                return fail(units, failure_name(err))
            self.quiet_until = max(self.quiet_until, now + delay)
            return self._again(chunk, failure_name(err), fail, pending)
        except BaseException:
            self.in_flight.pop(key, None)
            raise
        self._answered(key, tokens, now)
        if tokens:
            log.debug(
                "answered in %.2f s (timeout %.2f s): %d prompts, %d tokens, %d ahead; speed %.0f, %d at once",
                time.monotonic() - now,
                timeout,
                len(units),
                tokens,
                ahead,
                self.speed or 0,
                self.concurrency,
            )

    def _again(self, chunk, problem: str, fail: Fail, pending: deque) -> None:
        """The units of a failed request back at the head of the queue, those out of tries given up."""
        spent = [unit for unit, tries in chunk if tries >= self.retries]
        if spent:
            fail(spent, problem)
        again = [(unit, tries + 1) for unit, tries in chunk if tries < self.retries]
        self.counts["resent"] += len(again) > 0
        pending.extendleft(reversed(again))

    def _returned(self, key, tokens: int) -> float:
        """Count the busy seconds up to now; ``tokens`` answered by this request."""
        now = time.monotonic()
        if self.in_flight.pop(key, None) is not None:
            self.answered_tokens = MEMORY * self.answered_tokens + tokens
            self.busy_s = MEMORY * self.busy_s + (now - self.mark)
            self.mark = now
        return now

    def _answered(self, key, tokens: int, sent: float) -> None:
        now = self._returned(key, tokens)
        self.silent = 0
        if not self.adaptive or not tokens:
            return
        if now - sent > self.floor / 2:  # slow: fewer at once
            if sent >= self.lowered_at:
                self._lower(now)
        else:
            self.fast += 1
            if self.fast >= self.concurrency and self.concurrency < self.most:
                self.concurrency, self.fast = self.concurrency + 1, 0

    def _timed_out(self, key, tokens: int, ahead: int, sent: float) -> None:
        """Fewer at once, the speed no more than the request showed, and nothing sent until the server
        is done with what it was given (the module's doc)."""
        now = self._returned(key, 0)
        self.counts["timeouts"] += 1
        self._unanswered("Timeout", sent, now)
        self.last_timeout = now
        if ahead and self.busy_s:  # not answered in this time: the server is at most this fast
            bound = self.busy_s * ahead / (now - sent)
            self.answered_tokens = min(self.answered_tokens, bound) if self.answered_tokens else bound
        self.abandoned += tokens
        speed = self.speed  # the server may need this long for what was abandoned (as long again: no speed)
        left = self.abandoned / speed if speed else now - sent
        self.quiet_until = max(self.quiet_until, now + min(left, self.ceiling))
        self.draining = True
        if self.adaptive and sent >= self.lowered_at:
            self._lower(now)

    def _unanswered(self, problem: str, sent: float, now: float) -> None:
        if sent >= self.last_failure:  # sent after the last failure: another round unanswered
            self.silent += 1
        self.last_failure, self.last_problem = now, problem

    def _lower(self, now: float) -> None:
        self.concurrency, self.fast, self.lowered_at = max(1, self.concurrency // 2), 0, now

    def summary(self) -> str:
        """What the pacing settled on, for the reasoner's ``where``."""
        c = self.counts
        if not c["requests"]:
            return "not paced yet"
        speed = f"{self.speed:.0f} prompt tokens/s" if self.speed else "no speed measured"
        how = "paced by the server's speed" if self.adaptive else "fixed pacing"
        return (
            f"{how}: {speed}, {self.concurrency} of at most {self.most} requests at once, "
            f"{c['prompts'] / c['requests']:.1f} prompts a request on average (at most {self.per_request}), "
            f"timeouts up to {self.longest:.0f} s; {c['requests']} requests, {c['timeouts']} timed out, "
            f"{c['resent']} sent again after the server drained"
        )

"""The ``openai`` SDK's client as every caller of an OpenAI-compatible server here uses it (the
reasoner, its choice scoring, the service's upstream), and the short names of its failures.

Its bounds are the operator's, whatever the server does (issue 62): each attempt of a request ends
within ``timeout_s`` from its first byte sent to the reply's last byte read (the SDK's own timeout
bounds each read: a reply dripped a byte at a time held a request 16 s at a timeout of 2 s), a reply
is read up to ``max_reply_bytes`` (a line of a streamed one likewise: a 256 MiB line once added
1.8 GiB), and a redirect is never followed (a 307 re-posted the request, clip included, to another
host): it is the server's failure, ``HTTP 307``."""

from __future__ import annotations

import asyncio
import os

import httpx2

MAX_REPLY_BYTES = 16 << 20
"""The default bound on a reply (or a line of a streamed one): a chat completion with logprobs is a
few hundred KiB."""


class ReplyTooLarge(httpx2.RemoteProtocolError):
    """A reply (or a line of a streamed one) over the client's byte bound: read no further."""


class ReplyTooSlow(httpx2.ReadTimeout):
    """A reply not whole within the attempt's deadline."""


class BoundedStream(httpx2.AsyncByteStream):
    """A reply's body read within ``deadline`` (the loop's clock) and ``max_bytes`` (per line when
    ``lines``: a server-sent event stream may run long, each of its lines may not)."""

    def __init__(self, inner, deadline: float, max_bytes: int, lines: bool, request):
        self.inner, self.deadline, self.max_bytes, self.lines, self.request = inner, deadline, max_bytes, lines, request

    async def __aiter__(self):
        chunks, size = self.inner.__aiter__(), 0
        while True:
            try:
                async with asyncio.timeout_at(self.deadline):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise ReplyTooSlow("the reply did not end within its deadline", request=self.request) from None
            if self.lines and b"\n" in chunk:
                size = len(chunk) - chunk.rfind(b"\n") - 1
            else:
                size += len(chunk)
            if size > self.max_bytes:
                what = "a line of the reply" if self.lines else "the reply"
                raise ReplyTooLarge(f"{what} is over {self.max_bytes} bytes", request=self.request)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class Bounded(httpx2.AsyncBaseTransport):
    """``inner`` with each request's deadline and its reply's byte bound (:class:`BoundedStream`)."""

    def __init__(self, inner, timeout_s: float, max_bytes: int):
        self.inner, self.timeout_s, self.max_bytes = inner, timeout_s, max_bytes

    async def handle_async_request(self, request):
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                response = await self.inner.handle_async_request(request)
        except TimeoutError:
            raise ReplyTooSlow(f"no reply within {self.timeout_s:g} s", request=request) from None
        lines = response.headers.get("content-type", "").startswith("text/event-stream")
        response.stream = BoundedStream(response.stream, deadline, self.max_bytes, lines, request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class BoundedClient(httpx2.AsyncClient):
    """The SDK's HTTP client (its defaults: connection limits, the proxies of the environment) with
    every transport :class:`Bounded` and no redirects followed."""

    def __init__(self, timeout_s: float, max_bytes: int, **settings):
        self._bounds = (timeout_s, max_bytes)
        from openai._constants import DEFAULT_CONNECTION_LIMITS

        settings.setdefault("limits", DEFAULT_CONNECTION_LIMITS)
        super().__init__(timeout=timeout_s, follow_redirects=False, **settings)

    def _init_transport(self, *args, **kwargs):
        return Bounded(super()._init_transport(*args, **kwargs), *self._bounds)

    def _init_proxy_transport(self, *args, **kwargs):
        return Bounded(super()._init_proxy_transport(*args, **kwargs), *self._bounds)


def client(base_url: str, api_key_env: str, max_retries: int, timeout_s: float, max_reply_bytes: int = MAX_REPLY_BYTES):
    """An ``AsyncOpenAI`` client for ``base_url`` with the key from ``$api_key_env`` (a local server
    without one gets a placeholder: the SDK insists on a key, vLLM ignores it); each attempt within
    ``timeout_s`` whole, its reply within ``max_reply_bytes``, no redirects (the module's doc)."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(
        base_url=base_url,
        api_key=os.environ.get(api_key_env) or "no-key",
        max_retries=max_retries,
        timeout=timeout_s,
        http_client=BoundedClient(timeout_s, max_reply_bytes),
    )


def failure_name(err: Exception, url: bool = True) -> str:
    """A short reason for a request the SDK gave up on: ``HTTP 503``, ``Timeout``, ``ConnectionError
    (ConnectError) to http://...``...; ``url``: a connection error names the address it tried (the
    operator's message; never a client's, whom the service tells no address)."""
    import openai

    if isinstance(err, openai.APIStatusError):
        return f"HTTP {err.status_code}"
    if isinstance(err, openai.APITimeoutError):
        return "Timeout"
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__
        if isinstance(cause, ReplyTooLarge):
            return f"ReplyTooLarge ({cause})"
        name = f"ConnectionError ({type(cause).__name__})" if cause else "ConnectionError"
        request = getattr(err, "request", None)
        return f"{name} to {_shown(request.url)}" if url and request is not None else name
    return type(err).__name__


def _shown(address) -> str:
    """An address as an error message may show it: no user, password or query (a key may be there)."""
    return str(address.copy_with(username=None, password=None, query=None))

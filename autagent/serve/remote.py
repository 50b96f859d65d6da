"""Remote audio (``--allow-remote-audio``): fetched with a size cap, following at most a few redirects,
each hop's host resolved and refused when any of its addresses is private, loopback, link-local or
otherwise not public, unless the service was started with ``--allow-private-audio-hosts``.

A name that resolves to a public address when checked and to a private one when fetched (DNS
rebinding) is not caught here: put the service behind an egress proxy where that matters."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urljoin, urlsplit

MAX_REDIRECTS = 5


def resolve(host: str) -> list[str]:
    """Every address ``host`` resolves to (an IP literal is itself)."""
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None)})


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def check_host(url: str, allow_private: bool, resolver=resolve) -> None:
    from ..reasoners.chat import BadRequest

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"the audio URL {url!r} is not an http(s) URL")
    if allow_private:
        return
    try:
        addresses = await asyncio.to_thread(resolver, parts.hostname)
    except OSError:
        raise BadRequest(f"fetching the audio failed: the host {parts.hostname!r} does not resolve") from None
    private = [a for a in addresses if not is_public(a)]
    if private or not addresses:
        raise BadRequest(
            f"the audio URL's host {parts.hostname!r} is a private or loopback address ({', '.join(private)}): "
            "refused (start the service with --allow-private-audio-hosts to allow it)"
        )


async def fetch(url: str, max_bytes: int, allow_private: bool = False, resolver=resolve, transport=None) -> bytes:
    """Remote audio, at most ``max_bytes`` (a 400 past that, when the fetch fails, or when a hop's host
    is not public and ``allow_private`` is off)."""
    import httpx

    from ..reasoners.chat import BadRequest

    chunks: list[bytes] = []
    try:
        async with httpx.AsyncClient(timeout=30.0, follow_redirects=False, transport=transport) as client:
            for _ in range(MAX_REDIRECTS + 1):
                await check_host(url, allow_private, resolver)
                async with client.stream("GET", url) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    if response.status_code != 200:
                        raise BadRequest(f"fetching the audio failed: HTTP {response.status_code}")
                    size = 0
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            raise BadRequest(f"the audio is over the {max_bytes}-byte limit")
                        chunks.append(chunk)
                    break
            else:
                raise BadRequest(f"fetching the audio failed: more than {MAX_REDIRECTS} redirects")
    except httpx.HTTPError as err:
        raise BadRequest(f"fetching the audio failed: {type(err).__name__}") from None
    if not chunks:
        raise BadRequest("the audio is empty")
    return b"".join(chunks)

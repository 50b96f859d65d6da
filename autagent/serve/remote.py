"""Remote audio (``--allow-remote-audio``): fetched with a size cap and one overall deadline, following
at most a few redirects.  Each hop's host is put in its ASCII form once (IDNA 2008 with UTS 46, as
httpx writes it), resolved once, every address it resolves to checked, and the connection made to
the checked address itself (the name kept in the Host header and for TLS, SNI and certificate), so
that what is checked is what is reached: no second resolution for a rebinding name to change, no
second spelling of the name to resolve elsewhere.  An address is refused when it, or an IPv4
address it carries (IPv4-mapped and -translated, NAT64, 6to4, Teredo, IPv4-compatible), is private,
loopback, link-local or otherwise not global, unless the service was started with
``--allow-private-audio-hosts``.  A refusal names no address (no oracle of the service's network)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from pathlib import PurePosixPath
from urllib.parse import urljoin, urlsplit, urlunsplit

from tools.decoders import sniff

from ..reasoners.messages import FORMATS, BadRequest

MAX_REDIRECTS = 5
MIB = 1 << 20
EMBEDDING = (  # IPv6 prefixes whose last 32 bits are an IPv4 address
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64, well-known prefix
    ipaddress.ip_network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT)
    ipaddress.ip_network("::/96"),  # IPv4-compatible (deprecated)
)
LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")  # local-use NAT64: whatever it carries is local
SPECIAL = tuple(
    ipaddress.ip_network(net)
    for net in (
        "192.0.0.0/24",  # IETF protocol assignments (Python 3.11's is_global passes 192.0.0.8)
        "192.88.99.0/24",  # the deprecated 6to4 relay anycast
        "5f00::/16",  # SRv6 segment identifiers
        "3fff::/20",  # documentation (RFC 9637)
        "2001:db8::/32",  # documentation
        "fec0::/10",  # site-local (deprecated; is_global passes it)
        "100::/64",  # discard-only
    )
)
"""Special-purpose ranges that ``ipaddress``'s ``is_global`` (Python 3.11) lets through: never a clip's host."""


def too_big(size: int | None, limit: int) -> str:
    """A clip's size refusal, naming the flag that raises the limit (issue 63)."""
    said = f"{size} bytes, " if size is not None else ""
    return f"the audio is {said}over the {limit}-byte limit (--max-audio-mb {limit / MIB:g} raises it)"


def resolve(host: str) -> list[str]:
    """Every address ``host`` (ASCII) resolves to (an IP literal is itself)."""
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (none for a plain one)."""
    found = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
    found += [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) for net in EMBEDDING if ip in net]
    return [a for a in found if a is not None]


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if not ip.is_global or ip.is_multicast or any(ip in net for net in SPECIAL if net.version == ip.version):
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in LOCAL_NAT64:
            return False
        return all(is_public(str(a)) for a in embedded_ipv4(ip))
    return True


def ascii_host(host: str) -> str:
    """The host as it goes on the wire (IDNA 2008 / UTS 46: ``straße.example`` -> ``xn--strae-oqa.example``)."""
    import idna

    try:
        ipaddress.ip_address(host.strip("[]"))
        return host.strip("[]")
    except ValueError:
        pass
    try:
        return idna.encode(host.rstrip("."), uts46=True).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError, ValueError):
        raise BadRequest("the audio URL's host is not a valid name") from None


async def checked_target(url: str, allow_private: bool, resolver=resolve) -> tuple[str, str, str]:
    """(the URL to connect to, naming the checked address; the Host header; the TLS server name)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest("the audio URL is not an http(s) URL")
    host = ascii_host(parts.hostname)
    try:
        port = parts.port
    except ValueError:
        raise BadRequest("the audio URL's port is not a number") from None
    try:
        addresses = await asyncio.to_thread(resolver, host)
    except (OSError, UnicodeError):
        raise BadRequest("fetching the audio failed: its host does not resolve") from None
    if not addresses:
        raise BadRequest("fetching the audio failed: its host does not resolve")
    if not allow_private and not all(is_public(a) for a in addresses):
        raise BadRequest(
            "the audio URL's host is a private, loopback or link-local address: refused "
            "(start the service with --allow-private-audio-hosts to allow it)"
        )
    address = addresses[0].split("%")[0]
    literal = f"[{address}]" if ":" in address else address
    netloc = literal + (f":{port}" if port else "")
    header = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), header, host


def format_of(url: str, raw: bytes) -> str:
    """The clip's format from its first bytes, else its URL's path (never its query), else WAV (the
    clip is then checked against it: a playlist or unknown bytes are refused)."""
    found = sniff(raw[:64])
    if found in FORMATS:
        return found
    suffix = PurePosixPath(urlsplit(url).path).suffix.lstrip(".").lower()
    return suffix if suffix in FORMATS else "wav"


async def fetch(
    url: str, max_bytes: int, allow_private: bool = False, resolver=resolve, transport=None, timeout_s: float = 30.0
) -> bytes:
    """Remote audio, at most ``max_bytes``, whole within ``timeout_s`` (a 400 past either, when the fetch
    fails, or when a hop's host is not public and ``allow_private`` is off)."""
    try:
        return await asyncio.wait_for(_fetch(url, max_bytes, allow_private, resolver, transport), timeout_s)
    except asyncio.TimeoutError:
        raise BadRequest(f"fetching the audio took longer than {timeout_s:g} s") from None


async def _fetch(url: str, max_bytes: int, allow_private: bool, resolver, transport) -> bytes:
    import httpx

    chunks: list[bytes] = []
    try:
        async with httpx.AsyncClient(follow_redirects=False, transport=transport, trust_env=False) as client:
            for _ in range(MAX_REDIRECTS + 1):
                target, host, server_name = await checked_target(url, allow_private, resolver)
                request = client.build_request(
                    "GET", target, headers={"Host": host}, extensions={"sni_hostname": server_name}
                )
                response = await client.send(request, stream=True)
                try:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    if response.status_code != 200:
                        raise BadRequest(f"fetching the audio failed: HTTP {response.status_code}")
                    size = 0
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            raise BadRequest(too_big(None, max_bytes))
                        chunks.append(chunk)
                    break
                finally:
                    await response.aclose()
            else:
                raise BadRequest(f"fetching the audio failed: more than {MAX_REDIRECTS} redirects")
    except httpx.HTTPError as err:
        raise BadRequest(f"fetching the audio failed: {type(err).__name__}") from None
    if not chunks:
        raise BadRequest("the audio is empty")
    return b"".join(chunks)

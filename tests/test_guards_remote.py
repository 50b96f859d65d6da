"""Guards of remote audio's address checks (``make mutate-guards`` mutates autagent/serve/remote.py):
every address a name resolves to must be public (one private among public ones refuses it), IPv4 carried
inside IPv6 is checked, the connection goes to the checked address, redirects and size are capped at
their limits exactly, and a refusal names no address."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from autagent.reasoners.messages import BadRequest
from autagent.serve.remote import (
    MAX_REDIRECTS,
    ascii_host,
    checked_target,
    embedded_ipv4,
    fetch,
    format_of,
    is_public,
    too_big,
)

PUBLIC, PUBLIC6, PRIVATE = "93.184.216.34", "2606:4700:4700::1111", "10.0.0.7"


def target(url: str, addresses, allow_private: bool = False):
    return asyncio.run(checked_target(url, allow_private, lambda host: list(addresses)))


def test_a_name_resolving_to_a_public_and_a_private_address_is_refused():
    """``all`` -> ``any`` over the resolved addresses would let a name with one public address reach a
    private one; the order of the addresses does not matter, and the refusal names neither."""
    for addresses in ([PUBLIC, PRIVATE], [PRIVATE, PUBLIC], [PUBLIC6, "::1"], [PUBLIC, "169.254.169.254"]):
        with pytest.raises(BadRequest, match="private, loopback or link-local") as refused:
            target("http://mixed.example/a.wav", addresses)
        assert not any(a in str(refused.value) for a in addresses)
    url, host, server_name = target("http://mixed.example/a.wav", [PRIVATE, PUBLIC], allow_private=True)
    assert url == f"http://{PRIVATE}/a.wav" and host == server_name == "mixed.example"
    url, *_ = target("http://two.example/a.wav", [PUBLIC, "93.184.216.35"])
    assert url == f"http://{PUBLIC}/a.wav"  # the first checked address is the one connected to


@pytest.mark.parametrize(
    "address, public",
    [
        (PUBLIC, True),
        (PUBLIC6, True),
        ("2002:5db8:d822::", True),  # 6to4 carrying a public address
        ("::ffff:93.184.216.34", True),  # IPv4-mapped, public
        (PRIVATE, False),
        ("127.0.0.1", False),
        ("169.254.169.254", False),
        ("224.0.0.1", False),  # multicast
        ("ff0e::1", False),  # global-scope IPv6 multicast: is_global, still refused
        ("::1", False),
        ("fe80::1%eth0", False),  # a zone index is ignored, not an error
        ("::ffff:10.0.0.7", False),
        ("64:ff9b::a00:7", False),  # NAT64 of 10.0.0.7
        ("64:ff9b::5db8:d822", True),  # NAT64 of a public address
        ("64:ff9b:1::5db8:d822", False),  # local-use NAT64: refused whatever it carries
        ("2002:a00:7::", False),  # 6to4 of 10.0.0.7
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),  # Teredo carrying 192.0.2.45
        # special-purpose ranges Python 3.11's is_global lets through (remote.SPECIAL), each version's own
        ("192.0.0.8", False),
        ("192.88.99.1", False),
        ("5f00::1", False),
        ("3fff::1", False),
        ("fec0::1", False),
    ],
)
def test_which_addresses_are_public(address, public):
    assert is_public(address) is public


def test_the_ipv4_an_ipv6_address_carries():
    import ipaddress

    assert [str(a) for a in embedded_ipv4(ipaddress.ip_address("64:ff9b::a00:7"))] == ["10.0.0.7"]
    assert [str(a) for a in embedded_ipv4(ipaddress.ip_address("::ffff:10.0.0.7"))] == ["10.0.0.7"]
    assert [str(a) for a in embedded_ipv4(ipaddress.ip_address("::ffff:0:a00:7"))] == ["10.0.0.7"]  # translated
    assert embedded_ipv4(ipaddress.ip_address(PUBLIC6)) == []


def test_the_target_keeps_the_name_for_the_host_header_and_refuses_what_is_not_a_fetchable_url():
    url, host, server_name = target("https://Straße.example:8443/x/a.wav?sig=1", [PUBLIC6])
    assert url == f"https://[{PUBLIC6}]:8443/x/a.wav?sig=1"
    assert (host, server_name) == ("xn--strae-oqa.example:8443", "xn--strae-oqa.example")
    assert target("http://[2606:4700:4700::1111]", [PUBLIC6])[0] == f"http://[{PUBLIC6}]/"
    assert target("http://93.184.216.34/a.wav", [PUBLIC])[1] == PUBLIC
    for url, message in [
        ("ftp://files.example/a.wav", "not an http"),
        ("http:///a.wav", "not an http"),
        ("http://files.example:port/a.wav", "port is not a number"),
    ]:
        with pytest.raises(BadRequest, match=message):
            target(url, [PUBLIC])
    with pytest.raises(BadRequest, match="does not resolve"):
        target("http://nowhere.example/a.wav", [])

    def failing(host):
        raise OSError("no such name")

    with pytest.raises(BadRequest, match="does not resolve"):
        asyncio.run(checked_target("http://nowhere.example/a.wav", False, failing))
    assert ascii_host("Example.COM.") == "example.com" and ascii_host("[::1]") == "::1"
    with pytest.raises(BadRequest, match="not a valid name"):
        ascii_host("bad..name")


def _serve(handler, url="http://files.example/a.wav", max_bytes=8, **kw):
    return asyncio.run(fetch(url, max_bytes, False, lambda host: [PUBLIC], httpx.MockTransport(handler), **kw))


def test_the_size_cap_admits_exactly_the_limit_and_refuses_one_byte_more():
    assert _serve(lambda r: httpx.Response(200, content=b"12345678")) == b"12345678"
    with pytest.raises(BadRequest, match="over the 8-byte limit"):
        _serve(lambda r: httpx.Response(200, content=b"123456789"))
    with pytest.raises(BadRequest, match="HTTP 404"):
        _serve(lambda r: httpx.Response(404, content=b"gone"))
    with pytest.raises(BadRequest, match="empty"):
        _serve(lambda r: httpx.Response(200, content=b""))

    def broken(request):
        raise httpx.ConnectError("refused")

    with pytest.raises(BadRequest, match="ConnectError"):
        _serve(broken)


def test_redirects_are_followed_up_to_the_limit_each_hop_checked():
    def hops(n, last_host="files.example"):
        def handler(request):
            step = int(request.url.path.strip("/") or 0)
            if step < n:
                return httpx.Response(302, headers={"location": f"http://{last_host}/{step + 1}"})
            return httpx.Response(200, content=b"RIFF")

        return handler

    assert _serve(hops(MAX_REDIRECTS), url="http://files.example/0") == b"RIFF"
    with pytest.raises(BadRequest, match=f"more than {MAX_REDIRECTS} redirects"):
        _serve(hops(MAX_REDIRECTS + 1), url="http://files.example/0")
    hosts = {"files.example": [PUBLIC], "inside.example": [PRIVATE]}

    def handler(request):
        if request.headers["host"] == "files.example":
            return httpx.Response(302, headers={"location": "http://inside.example/a.wav"})
        return httpx.Response(200, content=b"secret")

    with pytest.raises(BadRequest, match="private"):  # the second hop is checked too
        asyncio.run(fetch("http://files.example/a.wav", 64, False, hosts.__getitem__, httpx.MockTransport(handler)))


def test_a_clips_format_comes_from_its_path_then_its_bytes():
    assert format_of("https://cdn.example/a.FLAC?x=1", b"RIFF") == "flac"
    assert format_of("https://cdn.example/a.exe", b"OggS...") == "ogg"
    assert format_of("https://cdn.example/a", b"") == "wav"


def test_at_most_five_redirects_and_the_default_refuses_private_hosts():
    def hops(n):
        def handler(request):
            step = int(request.url.path.strip("/") or 0)
            if step < n:
                return httpx.Response(302, headers={"location": f"http://files.example/{step + 1}"})
            return httpx.Response(200, content=b"RIFF")

        return handler

    assert MAX_REDIRECTS == 5  # "a few": the number the docs give
    assert _serve(hops(5), url="http://files.example/0") == b"RIFF"
    with pytest.raises(BadRequest, match="more than 5 redirects"):
        _serve(hops(6), url="http://files.example/0")
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=b"RIFF"))
    with pytest.raises(BadRequest, match="private"):  # allow_private is off unless asked for
        asyncio.run(fetch("http://inside.example/a.wav", 64, resolver=lambda h: [PRIVATE], transport=transport))


def test_a_redirect_is_followed_by_the_checks_never_by_the_client_and_a_location_alone_is_no_redirect():
    reached = []

    def handler(request):
        reached.append(request.url.host)
        if request.url.host == PUBLIC:
            return httpx.Response(302, headers={"location": "http://inside.example/a.wav"})
        return httpx.Response(200, content=b"secret")

    hosts = {"files.example": [PUBLIC], "inside.example": [PRIVATE]}
    with pytest.raises(BadRequest, match="private"):
        asyncio.run(fetch("http://files.example/a.wav", 64, False, hosts.__getitem__, httpx.MockTransport(handler)))
    assert reached == [PUBLIC]  # the private host was never reached
    located = lambda r: httpx.Response(200, content=b"RIFF", headers={"location": "http://x.example/"})  # noqa: E731
    assert _serve(located) == b"RIFF"  # a 200 with a Location header is the clip
    with pytest.raises(BadRequest, match="HTTP 302"):  # a redirect without a Location is a failure
        _serve(lambda r: httpx.Response(302))


def test_an_endless_body_is_cut_at_the_size_cap_not_read_whole():
    async def endless():
        while True:
            await asyncio.sleep(0)  # lets the deadline cancel a read that never ends
            yield b"x" * 4

    with pytest.raises(BadRequest, match="over the 8-byte limit"):
        _serve(lambda r: httpx.Response(200, content=endless()), timeout_s=5.0)


def test_names_and_literals_resolve_to_addresses():
    from autagent.serve.remote import resolve

    assert resolve("93.184.216.34") == [PUBLIC] and resolve("[::1]") == ["::1"]
    assert "127.0.0.1" in resolve("localhost")  # /etc/hosts: no network needed
    assert ascii_host("ＥＸＡＭＰＬＥ.com") == "example.com"  # UTS 46 maps full-width letters


def test_a_size_refusal_names_the_size_when_known_and_the_flag_in_mebibytes():
    assert too_big(30 << 20, 25 << 20) == (
        "the audio is 31457280 bytes, over the 26214400-byte limit (--max-audio-mb 25 raises it)"
    )
    with pytest.raises(BadRequest) as refused:  # a fetch cut at the cap does not know the whole size
        _serve(lambda r: httpx.Response(200, content=b"x" * ((1 << 20) + 1)), max_bytes=1 << 20)
    assert str(refused.value) == "the audio is over the 1048576-byte limit (--max-audio-mb 1 raises it)"


def test_the_environments_proxy_is_never_asked_the_checked_address_is_reached_itself(monkeypatch):
    """httpx reads HTTP_PROXY unless told not to (trust_env): the proxy would be sent the clip's request
    (and could reach another address than the one checked)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    reached, servers = [], []

    def server(body: bytes) -> int:  # (tests/helpers/serve.py's FakeUpstream would import torch for this)
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's API
                reached.append(body)
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        servers.append(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
        threading.Thread(target=servers[-1].serve_forever, daemon=True).start()
        return servers[-1].server_address[1]

    origin, proxy = server(b"RIFF clip"), server(b"proxy")
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    url = f"http://127.0.0.1:{origin}/a.wav"
    try:
        assert asyncio.run(fetch(url, 64, allow_private=True, timeout_s=10.0)) == b"RIFF clip"
    finally:
        for httpd in servers:
            httpd.shutdown()
    assert reached == [b"RIFF clip"]

"""The service in front of a hostile upstream (slow: ``make test-service``, which CI runs, and ``make
test-all``): :mod:`helpers.hostile_upstream` drips, floods, sends an endless line, redirects, sends NaN
or hangs mid-stream, drawn request by request (issue 62: the service's bounds are its own, whatever
the upstream does)."""

from __future__ import annotations

import base64
import time
from collections import Counter

import httpx
import pytest
from helpers.hostile import CPU_BOUND_S, HEALTH_BOUND_S, UPSTREAM_MISCHIEF, CpuMeter, HealthWatch
from helpers.serve import InThread, router_plugin, service_options
from test_serve_fuzz import _clip, fuzz_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tempo_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("fuzz") / "tempo", [-5.0, -5.0, -5.0, 5.0, -5.0, -5.0])


def test_every_misbehaviour_of_the_upstream_is_a_502_within_the_services_bounds(tempo_plugin, tmp_path):
    """The upstream drips, floods, sends one endless line, redirects, sends NaN or hangs mid-stream
    (:data:`helpers.hostile.UPSTREAM_MISCHIEF`, drawn request by request, streamed or not): never a 500,
    every request over within the upstream's deadline, a stream ended by an error event, none over 2 s
    of CPU, ``/health`` answering throughout."""
    from helpers.hostile_upstream import HostileUpstream
    from hypothesis import given
    from hypothesis import strategies as st

    from autagent.serve import create_app

    upstream = HostileUpstream("by_user")
    options = service_options(
        tempo_plugin, tmp_path, upstream=upstream.url, upstream_timeout_s=1.0, max_upstream_reply_bytes=1 << 20
    )
    app = InThread(create_app(options))
    clip = {"type": "input_audio", "input_audio": {"data": base64.b64encode(_clip(3)).decode(), "format": "wav"}}
    messages = [{"role": "user", "content": [clip, {"type": "text", "text": "Tempo?\n(A) slow\n(B) fast"}]}]
    statuses, failures, cpu = Counter(), [], CpuMeter()

    @fuzz_settings(60)
    @given(mischief=st.sampled_from(UPSTREAM_MISCHIEF), stream=st.booleans())
    def call(mischief, stream):
        body = {"model": "m", "messages": messages, "user": mischief, "stream": stream}
        started = time.perf_counter()
        reply = cpu.measure(
            f"{mischief} stream={stream}",
            lambda: httpx.post(app.url + "/v1/chat/completions", json=body, timeout=60),
        )
        took = time.perf_counter() - started
        statuses[(mischief.split(":")[0], stream, reply.status_code)] += 1
        ended = not stream or reply.status_code != 200 or reply.text.rstrip().endswith("data: [DONE]")
        if reply.status_code not in (200, 502) or took > 8 or not ended:
            failures.append((mischief, stream, reply.status_code, round(took, 1), reply.text[-300:]))

    try:
        assert httpx.post(app.url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=120)
        with HealthWatch(app.url) as watch:
            call()
        assert httpx.get(app.url + "/health").json()["status"] == "ok"
    finally:
        app.stop()
        upstream.httpd.shutdown()
    print(
        f"\nhostile upstream: {sum(statuses.values())} requests, (mischief, stream, status): {dict(statuses)}; the "
        f"most CPU {cpu.worst:.2f} s ({cpu.worst_what}); /health at worst {watch.worst:.2f} s over {watch.polls}"
    )
    assert not failures, failures[:5]
    assert any(status == 502 for _, _, status in statuses) and statuses[("echo", False, 200)] >= 1
    assert cpu.worst <= CPU_BOUND_S, (cpu.worst, cpu.worst_what)
    assert watch.worst <= HEALTH_BOUND_S and not watch.failures, (watch.worst, watch.failures)

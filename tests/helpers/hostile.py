"""What the fuzzers add to their generated traffic (issue 49): hostile strings (long lines, long runs
of spaces, deep nesting, playlists naming a local file, WAV headers that lie about their rate and
channels) and the time bound they hold the service to: no request over ``CPU_BOUND_S`` of the
process's CPU, ``/health`` answering within ``HEALTH_BOUND_S`` throughout."""

from __future__ import annotations

import base64
import struct
import threading
import time

import httpx

LABELS = ["A)", "(A)", "A.", "A:"]
CPU_BOUND_S = 2.0
# Wall-clock, so it moves with the machine's load: a loaded 2-core CI machine answered in 1.01 s once; the
# defects it guards against held /health for 16 s and 52 s.
HEALTH_BOUND_S = 2.0


def lying_wav(channels: int, rate: int, claimed_frames: int, real_bytes: int) -> bytes:
    """A 16-bit WAV whose header says ``channels`` at ``rate`` for ``claimed_frames``, followed by
    ``real_bytes`` of a tone (whatever the header says)."""
    data_size = min(claimed_frames * channels * 2, 0xFFFFFFF0)
    fmt = struct.pack("<HHIIHH", 1, channels, rate, (rate * channels * 2) & 0xFFFFFFFF, channels * 2 & 0xFFFF, 16)
    body = bytes((i * 37) % 251 for i in range(real_bytes))
    return (
        b"RIFF"
        + struct.pack("<I", min(36 + data_size, 0xFFFFFFFF))
        + b"WAVEfmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + (struct.pack("<I", data_size) + body)
    )


def playlists(target: str) -> list[str]:
    """Texts that name ``target`` (M3U, HLS, ffmpeg's concat script, PLS)."""
    return [
        f"#EXTM3U\n#EXTINF:2,x\n{target}\n",
        f"#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\nfile://{target}\n#EXT-X-ENDLIST\n",
        f"ffconcat version 1.0\nfile '{target}'\n",
        f"[playlist]\nFile1={target}\nNumberOfEntries=1\n",
    ]


def strategies(target: str):
    """Hypothesis strategies: ``texts`` (question texts), ``audio`` (base64 clips), ``deep`` (JSON text)."""
    from hypothesis import strategies as st

    spaces = st.integers(1, 120_000)
    texts = st.one_of(
        st.builds(lambda n, label: f"Which?\n{label} x" + " " * n + "y\n(B) z", spaces, st.sampled_from(LABELS)),
        st.builds(lambda n: "Which? " + "word " * n, st.integers(1, 30_000)),
        st.builds(lambda n: "\n" * n + "(A) a", st.integers(1, 70_000)),
        st.builds(lambda n: "Which?\n" + "\n".join(f"(A) c{i}" for i in range(n)), st.integers(60, 9000)),
    )
    raw = st.one_of(
        st.sampled_from([p.encode() for p in playlists(target)]),
        st.builds(
            lying_wav,
            st.sampled_from([1, 2, 8, 64, 65, 0]),
            st.sampled_from([8000, 44100, 384_000, 768_000, 0, 0x7FFFFFFF]),
            st.sampled_from([0, 100, 10**6, 10**9]),
            st.sampled_from([0, 64, 4096, 60_000]),
        ),
    )
    audio = raw.map(lambda data: base64.b64encode(data).decode())
    deep = st.builds(lambda d, open_, close: open_ * d + close * d, st.integers(40, 150_000), *map(st.just, "[]"))
    return texts, audio, deep


class HealthWatch:
    """Polls ``/health`` every ``every_s`` in a thread while the block runs; ``worst`` is the slowest answer."""

    def __init__(self, url: str, every_s: float = 0.25):
        self.url, self.every_s, self.worst, self.polls, self.failures = url, every_s, 0.0, 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.wait(self.every_s):
                started = time.perf_counter()
                try:
                    ok = client.get(self.url + "/health").status_code == 200
                except httpx.HTTPError as err:
                    ok = False
                    self.failures.append(type(err).__name__)
                self.worst = max(self.worst, time.perf_counter() - started)
                self.polls += 1
                if not ok and not self.failures:
                    self.failures.append("not 200")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=15)


class CpuMeter:
    """The process's CPU seconds per measured call (the service in process; the client's share is small)."""

    def __init__(self):
        self.worst, self.worst_what = 0.0, ""

    def measure(self, what: str, call):
        started = time.process_time()
        try:
            return call()
        finally:
            spent = time.process_time() - started
            if spent > self.worst:
                self.worst, self.worst_what = spent, what


def wide_bodies():
    """A hypothesis strategy of (path, JSON text): bodies of many small items wherever the schema has a
    list (issue 62: 6.4 MB of ``{}`` in ``messages`` held the event loop 12.8 s), from just past a cap
    to past the body's count of JSON values."""
    import json

    from hypothesis import strategies as st

    many = st.integers(900, 200_000)
    user = '{"role": "user", "content": "Which?"}'
    chat = "/v1/chat/completions"
    return st.one_of(
        st.builds(lambda k: (chat, '{"model": "m", "messages": [' + ",".join(["{}"] * k) + "]}"), many),
        st.builds(
            lambda k: (
                chat,
                '{"messages": [{"role": "user", "content": [' + ",".join(['{"type": "text"}'] * k) + "]}]}",
            ),
            many,
        ),
        st.builds(
            lambda k: (chat, f'{{"messages": [{user}], "choices": {json.dumps([f"c{i}" for i in range(k)])}}}'), many
        ),
        st.builds(lambda k: (chat, f'{{"messages": [{user}], "stop": {json.dumps(["s"] * k)}}}'), many),
        st.builds(
            lambda k: ("/v1/select", json.dumps({"question": "Which?", "choices": [f"c{i}" for i in range(k)]})), many
        ),
    )


UPSTREAM_MISCHIEF = ("echo", "drip", "huge:4194304", "long_line:4194304", "redirect", "nan", "hang_stream")
"""What :class:`helpers.hostile_upstream.HostileUpstream` in ``by_user`` mode is asked to do, request by request."""

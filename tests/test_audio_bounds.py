"""Every clip of every message bound for the upstream passes one policy (issue 62, items 4 and 9): its
length is read from the header before anything is decoded, and the decoding is capped where there is
no header (an 89 KB FLAC holding an hour of silence once decoded whole to 976 MiB and a 153.6 MB
upstream body); a remote or file ``audio_url`` in an earlier message is refused unless remote audio is
allowed, and then fetched by the service itself under the remote-audio policy and sent on as a data:
URL (``http://169.254.169.254/...`` and ``file:///etc/passwd`` once went upstream as they came).
Every test here fails on 0169c2d."""

from __future__ import annotations

import base64
import io
import subprocess
import time
import tracemalloc

import httpx
import numpy as np
import pytest
import soundfile as sf
from helpers.serve import FakeUpstream, QuietHandler, Upstream, router_plugin, start_service

from autagent.reasoners.messages import BadRequest
from autagent.serve.upstream_audio import for_upstream


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.fixture(scope="module")
def hour_of_silence(tmp_path_factory) -> bytes:
    """One hour of silence at 8 kHz in FLAC: under 100 KB."""
    path = tmp_path_factory.mktemp("long") / "hour.flac"
    block = np.zeros(8000 * 60, np.int16)
    with sf.SoundFile(str(path), "w", 8000, 1, format="FLAC", subtype="PCM_16") as out:
        for _ in range(60):
            out.write(block)
    raw = path.read_bytes()
    assert len(raw) < 150_000
    return raw


@pytest.fixture(scope="module")
def tone() -> bytes:
    t = np.arange(22050) / 22050
    buffer = io.BytesIO()
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 22050, format="WAV")
    return buffer.getvalue()


def _conversation(earlier: dict, tone: bytes) -> list:
    """An earlier user turn holding ``earlier`` (a clip part), the assistant's reply, and the last user
    turn with a good clip: the one the plugin reads and checks."""
    last = {"type": "input_audio", "input_audio": {"data": _b64(tone), "format": "wav"}}
    return [
        {"role": "user", "content": [earlier, {"type": "text", "text": "What is this?"}]},
        {"role": "assistant", "content": "A recording."},
        {"role": "user", "content": [last, {"type": "text", "text": "And this one?\n(A) a tone\n(B) a voice"}]},
    ]


def _flac_part(raw: bytes) -> dict:
    return {"type": "input_audio", "input_audio": {"data": _b64(raw), "format": "flac"}}


@pytest.mark.parametrize("rate", [16000, 0])
def test_an_hour_in_a_small_flac_is_refused_from_its_header(hour_of_silence, tone, rate):
    messages = _conversation(_flac_part(hour_of_silence), tone)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(BadRequest) as refused:
            for_upstream(messages, "send", rate)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    said = str(refused.value)
    assert said.startswith("messages[0].content[0]: the audio is 3600.0 s, longer than 30 s"), said
    assert "--max-audio-seconds" in said
    assert peak < 8 << 20 and time.perf_counter() - started < 5, (peak, time.perf_counter() - started)


def test_a_clip_without_a_length_in_its_header_is_decoded_no_further_than_the_cap(tmp_path, tone):
    """An m4a states no length libsndfile reads: decoded at most the cap + 1 s, then refused."""
    from autagent.serve.upstream_audio import AudioPolicy

    source = tmp_path / "long.wav"
    sf.write(str(source), np.full(8000 * 60, 0.1, np.float32), 8000)
    m4a = tmp_path / "long.m4a"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(source), str(m4a)], check=True)
    part = {"type": "input_audio", "input_audio": {"data": _b64(m4a.read_bytes()), "format": "m4a"}}
    with pytest.raises(BadRequest, match=r"the audio is 1[01]\.\d s, longer than 10 s"):
        for_upstream(_conversation(part, tone), "send", 16000, AudioPolicy(max_seconds=10.0))


def test_a_clip_over_the_byte_limit_names_the_flag(tone):
    from autagent.serve.upstream_audio import AudioPolicy

    with pytest.raises(BadRequest, match=r"over the 1000-byte limit \(--max-audio-mb"):
        for_upstream(
            _conversation(_flac_part(b"fLaC" + b"\0" * 2000), tone), "send", 16000, AudioPolicy(max_bytes=1000)
        )


@pytest.mark.parametrize(
    "url",
    ["http://169.254.169.254/latest/meta-data/", "file:///etc/passwd", "HTTPS://example.com/a.wav", "/etc/passwd"],
)
def test_an_earlier_url_is_refused_unless_remote_audio_is_allowed(url, tone):
    part = {"type": "audio_url", "audio_url": {"url": url}}
    with pytest.raises(BadRequest, match=r"messages\[0\]\.content\[0\]: .*(--allow-remote-audio)"):
        for_upstream(_conversation(part, tone), "send", 0)


@pytest.fixture(scope="module")
def quiet_plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("bounds-plugin") / "quiet", [-5.0] * 6)


def _chat(service, messages) -> httpx.Response:
    return httpx.post(service.url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=60)


@pytest.mark.parametrize("rate", [16000, 0])
def test_the_service_sends_no_clip_of_an_earlier_message_past_the_policy(
    quiet_plugin, tmp_path, hour_of_silence, tone, rate
):
    upstream = Upstream("echo")
    service = start_service(quiet_plugin, tmp_path, upstream.url, upstream_sample_rate=rate)
    try:
        refused = {
            "an hour of FLAC": (_flac_part(hour_of_silence), "longer than 30 s (--max-audio-seconds"),
            "the metadata service": (
                {"type": "audio_url", "audio_url": {"url": "http://169.254.169.254/latest/meta-data/"}},
                "remote audio URLs are refused",
            ),
            "a local file": ({"type": "audio_url", "audio_url": {"url": "file:///etc/passwd"}}, "must be a data: URL"),
        }
        for name, (part, words) in refused.items():
            reply = _chat(service, _conversation(part, tone))
            assert reply.status_code == 400 and words in reply.json()["error"]["message"], (name, reply.text)
        assert upstream.seen == []  # nothing of them reached the upstream
        assert _chat(service, _conversation(_flac_part(_flac(tone)), tone)).status_code == 200
        assert len(upstream.seen) == 1
    finally:
        service.stop()


def _flac(wav: bytes) -> bytes:
    samples, rate = sf.read(io.BytesIO(wav), dtype="float32")
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format="FLAC")
    return buffer.getvalue()


class ClipServer(FakeUpstream):
    """A stand-in host that serves one clip at any path."""

    def __init__(self, raw: bytes):
        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802 - http.server API
                self.send_response(200)
                self.send_header("Content-Type", "audio/wav")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        super().__init__(Handler)


def test_an_allowed_remote_clip_is_fetched_by_the_service_and_sent_as_data(quiet_plugin, tmp_path, tone):
    """Allowed, a remote clip in an earlier message is fetched under the remote-audio policy (a private
    host refused unless allowed too) and goes upstream as a data: URL, never as the URL."""
    clips, upstream = ClipServer(tone), Upstream("echo")
    url = clips.url.removesuffix("/v1") + "/earlier.wav"
    part = {"type": "audio_url", "audio_url": {"url": url}}
    public_only = start_service(quiet_plugin, tmp_path / "a", upstream.url, allow_remote_audio=True)
    try:
        reply = _chat(public_only, _conversation(part, tone))
        assert reply.status_code == 400 and "private, loopback or link-local" in reply.text, reply.text
    finally:
        public_only.stop()
    private_too = start_service(
        quiet_plugin, tmp_path / "b", upstream.url, allow_remote_audio=True, allow_private_audio_hosts=True
    )
    try:
        assert _chat(private_too, _conversation(part, tone)).status_code == 200
    finally:
        private_too.stop()
    (sent,) = upstream.seen
    earlier = sent["messages"][0]["content"][0]["audio_url"]["url"]
    assert earlier.startswith("data:audio/wav;base64,") and url not in str(sent)
    info = sf.info(io.BytesIO(base64.b64decode(earlier.split(",", 1)[1])))
    assert (info.samplerate, info.channels) == (16000, 1) and abs(info.duration - 1.0) < 0.01

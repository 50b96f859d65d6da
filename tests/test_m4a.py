"""Phone audio decodes (issue 63, item 3): AAC in ``.m4a``/``.mp4`` as ffmpeg writes it by default puts
its index after the audio, which ffmpeg cannot reach from a pipe; such a clip is decoded from a private
temporary copy (mode 0600, deleted after, ``-protocol_whitelist file``, its demuxer named), on the
command line and in the service, every other listed container still from a pipe; a clip that fails
says ffmpeg's own reason; one bad clip is an error line of ``select --batch``, the others go on.
Every test here fails on 0169c2d."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from helpers.serve import router_plugin, start_service

from autagent.cli import main
from autagent.reasoners.messages import FORMATS
from tools import decoders
from tools.audio import AudioError, load_audio

SECONDS = 12.0
"""Long enough that ffmpeg's read buffer cannot hide a seek back to the start (10 s did not decode)."""


def _encode(source: Path, target: Path, *extra: str) -> Path:
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(source), *extra, str(target)], check=True)
    return target


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    """A 12 s stereo tone at 44.1 kHz in every listed format, each as ``ffmpeg -i x.wav y.<ext>`` writes it."""
    folder = tmp_path_factory.mktemp("phone")
    t = np.arange(int(44_100 * SECONDS)) / 44_100
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    source = folder / "source.wav"
    sf.write(str(source), np.stack([tone, tone], 1), 44_100)
    made = {fmt: _encode(source, folder / f"clip.{fmt}") for fmt in sorted(FORMATS)}
    made["mp4"] = _encode(source, folder / "clip.mp4")
    return made


def test_an_m4a_as_ffmpeg_writes_it_has_its_index_last(clips):
    data = clips["m4a"].read_bytes()
    assert data[4:8] == b"ftyp" and data.find(b"moov") > data.find(b"mdat") > 0


@pytest.mark.parametrize("fmt", sorted(FORMATS) + ["mp4"])
def test_every_listed_container_decodes_through_ffmpeg(clips, fmt):
    """ffmpeg's own path for each (libsndfile takes some first in :func:`load_audio`)."""
    sniffed = decoders.sniff(clips[fmt].read_bytes()[:64])
    samples, rate = decoders.read_ffmpeg(str(clips[fmt]), sniffed, 30.0, True)
    assert rate in (44_100, 48_000) and abs(samples.shape[1] / rate - SECONDS) < 0.1, samples.shape  # opus: 48 kHz
    assert np.abs(samples).max() > 0.2


@pytest.mark.parametrize("fmt", ["m4a", "mp4"])
def test_the_mp4_family_is_read_from_a_private_copy_and_only_that(clips, fmt, monkeypatch):
    seen = []
    real = subprocess.Popen

    def spy(command, **kwargs):
        source = command[command.index("-i") + 1]
        path = source.removeprefix("file:")
        seen.append((command, path, os.stat(path).st_mode & 0o777))
        return real(command, **kwargs)

    monkeypatch.setattr(decoders.subprocess, "Popen", spy)
    audio = load_audio(clips[fmt], 16_000, 30.0)
    assert abs(audio.duration - SECONDS) < 0.1
    ((command, copy, mode),) = seen
    assert command[command.index("-protocol_whitelist") + 1] == "file"
    assert command[command.index("-f") + 1] == "mov" and "-enable_drefs" in command
    assert str(clips[fmt]) not in " ".join(command) and mode == 0o600
    assert not os.path.exists(copy), "the copy is deleted after"


def test_every_other_container_still_reads_a_pipe(clips, monkeypatch):
    seen = []
    real = subprocess.Popen
    monkeypatch.setattr(decoders.subprocess, "Popen", lambda c, **k: seen.append(c) or real(c, **k))
    decoders.read_ffmpeg(str(clips["webm"]), "webm", 5.0, True)
    (command,) = seen
    assert command[command.index("-protocol_whitelist") + 1] == "pipe" and "pipe:0" in command


def test_a_clip_ffmpeg_cannot_decode_says_ffmpegs_reason(clips, tmp_path):
    cut = tmp_path / "cut.m4a"
    cut.write_bytes(clips["m4a"].read_bytes()[:100_000])  # the index at the end is gone
    with pytest.raises(AudioError) as refused:
        load_audio(cut, 16_000, 30.0)
    reason = refused.value.reason
    assert "moov atom not found" in reason, reason
    assert str(tmp_path) not in reason and "/tmp" not in reason and len(reason) < 400


def test_ffmpeg_reason_is_one_short_line_naming_no_path():
    said = "[mov,mp4 @ 0x55aa] stream 0: partial file\n    Last message repeated 3 times\n" * 50
    said += "/tmp/autagent-clip-x.m4a: Invalid data found\n" + "x" * 2000
    line = decoders.ffmpeg_reason(said, "/tmp/autagent-clip-x.m4a")
    assert line.startswith("stream 0: partial file; the clip: Invalid data found")
    assert "\n" not in line and len(line) <= decoders.MAX_REASON_CHARS and "@ 0x" not in line


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    return router_plugin(tmp_path_factory.mktemp("m4a-plugin") / "p", [3.0, -3.0, -3.0, 3.0, -3.0, -3.0])


def test_select_takes_an_m4a_on_the_command_line(clips, plugin, capsys):
    argv = ["select", "--plugin", str(plugin), "--audio", str(clips["m4a"]), "--question", "How fast is it?"]
    assert main(argv) == 0, capsys.readouterr().err
    reply = json.loads(capsys.readouterr().out)
    assert reply["tools"] == ["asr", "tempo"]


def test_one_bad_clip_is_an_error_line_of_a_batch_and_the_others_go_on(clips, plugin, tmp_path, capsys):
    (tmp_path / "broken.m4a").write_bytes(clips["m4a"].read_bytes()[:100_000])
    for fmt in ("m4a", "mp3"):
        (tmp_path / f"good.{fmt}").write_bytes(clips[fmt].read_bytes())
    argv = ["select", "--plugin", str(plugin), "--batch", str(tmp_path), "--question", "How fast is it?"]
    code = main(argv)
    out, err = capsys.readouterr()
    lines = {Path(line["audio"]).name: line for line in map(json.loads, out.splitlines())}
    assert set(lines) == {"broken.m4a", "good.m4a", "good.mp3"}, out
    assert lines["good.m4a"]["tools"] == lines["good.mp3"]["tools"] == ["asr", "tempo"]
    assert "moov atom not found" in lines["broken.m4a"]["error"] and "tools" not in lines["broken.m4a"]
    assert code == 1 and "1 of 3 clips" in err.strip().splitlines()[-1], err


def test_the_service_takes_an_m4a(clips, plugin, tmp_path):
    service = start_service(plugin, tmp_path)
    try:
        audio = base64.b64encode(clips["m4a"].read_bytes()).decode()
        body = {"audio": audio, "format": "m4a", "question": "How fast is it?", "choices": ["90 BPM", "120 BPM"]}
        reply = httpx.post(service.url + "/v1/select", json=body, timeout=120)
        assert reply.status_code == 200 and reply.json()["tools"] == ["asr", "tempo"], reply.text
        cut = base64.b64encode(clips["m4a"].read_bytes()[:100_000]).decode()
        refused = httpx.post(service.url + "/v1/select", json={**body, "audio": cut}, timeout=120)
        assert refused.status_code == 400 and "moov atom not found" in refused.json()["error"]["message"]
        assert str(tmp_path) not in refused.text
    finally:
        service.stop()

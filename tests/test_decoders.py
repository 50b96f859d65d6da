"""The audio loader's decoders follow no reference and decode no more than a bound (issue 49): a
playlist, an HLS index or a concat script is refused whatever it is named; ffmpeg is told its format
and reads a pipe; the decoded samples are capped from the header and the channels averaged block by
block.  Every test here fails on 2e698d3."""

from __future__ import annotations

import subprocess
import tracemalloc

import numpy as np
import pytest
import soundfile as sf

from tools.audio import AudioError, load_audio


@pytest.fixture(scope="module")
def secret(tmp_path_factory):
    """A file of the server's own that no clip may name: a tone in FLAC."""
    folder = tmp_path_factory.mktemp("secret")
    t = np.arange(16000 * 2) / 16000
    path = folder / "private.flac"
    sf.write(str(path), (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
    return path


def playlists(secret) -> dict[str, str]:
    return {
        "m3u": f"#EXTM3U\n#EXTINF:2,x\n{secret}\n",
        "hls": f"#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\nfile://{secret}\n#EXT-X-ENDLIST\n",
        "concat": f"ffconcat version 1.0\nfile '{secret}'\n",
        "bare_concat": f"file '{secret}'\n",
        "bom_m3u": f"\ufeff  #EXTM3U\n{secret}\n",
    }


@pytest.mark.parametrize("kind", ["m3u", "hls", "concat", "bare_concat", "bom_m3u"])
@pytest.mark.parametrize("suffix", ["wav", "mp3", "m4a"])
def test_a_playlist_never_reads_the_file_it_names(secret, tmp_path, kind, suffix):
    clip = tmp_path / f"clip.{suffix}"
    clip.write_text(playlists(secret)[kind])
    with pytest.raises(AudioError) as refused:
        load_audio(clip, 16000)
    assert refused.value.code in ("playlist", "undecodable")
    assert str(secret) not in refused.value.reason


def test_ffmpeg_is_told_the_format_reads_a_pipe_and_may_open_nothing_else(tmp_path, monkeypatch):
    import tools.decoders as decoders

    commands = []
    real = subprocess.Popen

    def spy(command, **kwargs):
        commands.append(command)
        return real(command, **kwargs)

    monkeypatch.setattr(decoders.subprocess, "Popen", spy)
    source = tmp_path / "tone.wav"
    t = np.arange(48000) / 48000
    sf.write(str(source), (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 48000)
    for suffix, codec in (("m4a", "aac"), ("webm", "libopus")):
        encoded = tmp_path / f"tone.{suffix}"
        encode = ["ffmpeg", "-loglevel", "error", "-y", "-i", str(source), "-c:a", codec, str(encoded)]
        subprocess.run(encode, check=True)
        audio = load_audio(encoded, None)
        assert abs(audio.duration - 1.0) < 0.1
        command = commands[-1]
        # the MP4 family seeks (its index may come last): a private copy of the bytes, no other protocol
        protocol, given = ("file", "file:") if suffix in decoders.SEEKABLE else ("pipe", "pipe:0")
        assert command[command.index("-protocol_whitelist") + 1] == protocol
        assert command[command.index("-f") + 1] == decoders.FFMPEG_DEMUXERS[suffix]
        assert command[command.index("-i") + 1].startswith(given)
        assert str(encoded) not in " ".join(command)


def test_samples_are_capped_from_the_header_before_decoding(tmp_path):
    """8 channels at 384 kHz for 10 s, constant: a small FLAC that decoded to 123 MB of samples (the
    issue's, for 29 s: 96 KB, 430 MiB)."""
    path = tmp_path / "wide.flac"
    block = np.full((384_000, 8), 0.25, np.float32)
    with sf.SoundFile(str(path), "w", 384_000, 8, format="FLAC") as out:
        for _ in range(10):
            out.write(block)
    assert path.stat().st_size < 2_000_000
    tracemalloc.start()
    try:
        with pytest.raises(AudioError) as refused:
            load_audio(path, 16000, 30.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.code == "too_many_samples" and peak < 20 << 20


def test_channels_are_averaged_block_by_block(tmp_path):
    """An 8-channel clip costs one channel's memory, not eight."""
    path = tmp_path / "eight.flac"
    t = np.arange(48_000 * 10) / 48_000
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    sf.write(str(path), np.stack([tone] * 8, 1), 48_000, format="FLAC")
    tracemalloc.start()
    try:
        audio = load_audio(path, None, 30.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.allclose(audio.samples, tone, atol=1e-4)
    assert peak < 4 * tone.nbytes, peak  # eight channels whole: 8x, and the average beside them

"""Tools on arriving audio (``tools.arriving``): streamed in 100 ms chunks at 24 kHz, each tool's record
of the whole clip is the one the tool gives the clip posted whole, or, for a transcript cut at pauses,
its documented equivalent (the same words, times within the tool's resolution)."""

from __future__ import annotations

import re

import numpy as np
import pytest

RATE = 24000


def _as_24k(path, tmp_path, name: str):
    """The fixture at 24 kHz, 16-bit, written as a client posting it whole would write it."""
    from tools.arriving import wav_bytes
    from tools.audio import load_audio

    pcm = np.round(np.clip(load_audio(path, RATE).samples, -1, 1) * 32767).astype(np.int16)
    out = tmp_path / f"{name}.wav"
    out.write_bytes(wav_bytes(pcm, RATE))
    return pcm, str(out)


def _streamed(tool: str, pcm: np.ndarray, path: str, runner, chunk_s: float = 0.1) -> dict:
    from tools.arriving import ClipStream

    clip = ClipStream(runner, RATE, max_seconds=30.0)
    clip.select([tool])
    step = int(chunk_s * RATE)
    for start in range(0, len(pcm), step):
        clip.add(pcm[start : start + step].tobytes())
        clip.step()
    return clip.finish(path)[tool]


@pytest.fixture(scope="module")
def runner():
    from tools import ToolRunner

    return ToolRunner("embedded")


@pytest.mark.parametrize(
    "tool, fixture", [("tempo", "click_wav"), ("pitch", "melody_wav"), ("sound_events", "music_wav")]
)
def test_a_streamed_tool_does_its_work_as_the_audio_comes_and_gives_the_whole_clips_record(
    tool, fixture, request, runner, tmp_path
):
    from tools.arriving import ClipStream, Runner

    found = request.getfixturevalue(fixture)
    pcm, path = _as_24k(found[0] if isinstance(found, tuple) else found, tmp_path, fixture)
    whole = runner.run(tool, path)
    clip = ClipStream(runner, RATE, max_seconds=30.0)
    clip.select([tool])
    for start in range(0, len(pcm), RATE // 10):
        clip.add(pcm[start : start + RATE // 10].tobytes())
        clip.step()
    streamed_runner = clip.runners[tool]
    assert type(streamed_runner) is not Runner  # a runner of its own: frames or patches made as they came
    made = getattr(streamed_runner, "patches", None) or getattr(streamed_runner, "frames", None)
    done = len(made.scores) if hasattr(made, "scores") else getattr(made, "done", None)
    assert done, f"{tool}: nothing computed before the clip ended"
    assert "error" not in whole and clip.finish(path)[tool] == whole


@pytest.mark.parametrize(
    "tool, fixture", [("chords", "chord_wav"), ("emotion", "speech_wav"), ("speakers", "speech_wav")]
)
def test_a_tool_run_at_the_clips_end_hears_the_samples_the_whole_clip_gives(tool, fixture, request, runner, tmp_path):
    """These tools do nothing while the clip arrives: the claim is only that the samples resampled as it
    came are, to the last sample, the ones the whole clip is loaded as, so the record is the whole clip's."""
    from tools import get_tool
    from tools.arriving import ClipStream, Runner
    from tools.audio import load_audio

    found = request.getfixturevalue(fixture)
    pcm, path = _as_24k(found[0] if isinstance(found, tuple) else found, tmp_path, fixture)
    clip = ClipStream(runner, RATE, max_seconds=30.0)
    clip.select([tool])
    for start in range(0, len(pcm), RATE // 10):
        clip.add(pcm[start : start + RATE // 10].tobytes())
        clip.step()
    assert type(clip.runners[tool]) is Runner
    clip.end()
    rate = get_tool(tool).backend("embedded").sample_rate
    assert np.array_equal(clip.samples(rate), load_audio(path, rate, 30.0).samples)
    whole = runner.run(tool, path)
    assert "error" not in whole and clip.finish(path)[tool] == whole


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


@pytest.mark.parametrize(
    "first, second",
    [
        ("The pilot announced a short delay.", "Please keep your seat belts fastened."),
        ("My sister keeps the cat at home.", "The soup tastes better with a little pepper."),
    ],
)
def test_a_transcript_made_in_a_pause_has_the_whole_clips_words_and_times(first, second, runner, tmp_path):
    """Two sentences with a second between them and half a second of quiet after: the clip is
    transcribed in each pause, so at the end nothing is left to do; the record has the whole clip's
    words and segment times within 0.2 s (it heard the same speech, less the quiet tail; Whisper's
    segment ends moved by 0.1 s here)."""
    from autagent.data import synth

    gap, tail = np.zeros(synth.SR, np.float32), np.zeros(synth.SR // 2, np.float32)
    spoken = [synth.speech(first, voice="en-us", rate=150), synth.speech(second, voice="en-us", rate=150)]
    source = tmp_path / "two.wav"
    synth.write_wav(source, synth.normalise(np.concatenate([spoken[0], gap, spoken[1], tail])))
    pcm, path = _as_24k(source, tmp_path, "two")
    whole = runner.run("asr", path)
    streamed = _streamed("asr", pcm, path, runner)
    assert streamed["version"] == whole["version"] + "+stream"  # made in the pause: cached apart
    assert _words(streamed["output"]["text"]) == _words(whole["output"]["text"]) != []
    assert len(streamed["output"]["segments"]) == len(whole["output"]["segments"])
    for ours, theirs in zip(streamed["output"]["segments"], whole["output"]["segments"]):
        assert abs(ours["start"] - theirs["start"]) <= 0.2 and abs(ours["end"] - theirs["end"]) <= 0.2


def test_a_transcript_of_speech_to_the_end_is_the_whole_clips(runner, tmp_path, speech_wav):
    pcm, path = _as_24k(speech_wav[0], tmp_path, "speech")
    assert _streamed("asr", pcm, path, runner) == runner.run("asr", path)


def test_the_buffer_has_a_cap(runner):
    from tools.arriving import ClipStream, ClipTooLong

    clip = ClipStream(runner, RATE, max_seconds=1.0)
    clip.add(np.zeros(RATE, np.int16).tobytes())
    with pytest.raises(ClipTooLong, match="cap of 1 s"):
        clip.add(np.zeros(1, np.int16).tobytes())
    assert clip.received == RATE


@pytest.mark.parametrize("fixture", ["speech_wav", "music_wav", "click_wav", "melody_wav"])
def test_the_embedded_reasoners_ear_hears_an_arriving_clip_as_the_whole_clip(fixture, request, runner, tmp_path):
    """What the embedded reasoner hears of a clip fed as it arrives is what it hears of the clip whole."""
    from autagent.reasoners.hearing import Listener
    from tools.arriving import ClipStream

    found = request.getfixturevalue(fixture)
    pcm, path = _as_24k(found[0] if isinstance(found, tuple) else found, tmp_path, fixture)
    streaming = Listener()
    ear, clip = streaming.stream(), ClipStream(runner, RATE)
    for start in range(0, len(pcm), RATE // 10):
        clip.add(pcm[start : start + RATE // 10].tobytes())
        clip.step()
        ear.feed(clip.samples(16000))
    clip.finish(path)
    ear.finish(clip.samples(16000), path)
    assert len(streaming._memo) == 1  # heard as it came: listen() reads the memo
    assert streaming.listen(path) == Listener().listen(path)

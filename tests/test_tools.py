"""The six tools on audio the tests generate: real outputs against known truths."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tools import TOOL_IDS, ToolRunner, get_tool, parse_tool_list


@pytest.fixture(scope="module")
def runner():
    return ToolRunner("embedded")


def test_registry_order_and_ids():
    assert TOOL_IDS == ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")
    assert [get_tool(t).index for t in TOOL_IDS] == list(range(6))
    assert parse_tool_list("chords,asr") == ["asr", "chords"]
    with pytest.raises(KeyError, match="unknown tool 'nope'"):
        parse_tool_list("asr,nope")


def test_record_shape(runner, speech_wav):
    record = runner.run("tempo", str(speech_wav[0]))
    assert set(record) == {"tool", "output", "backend", "version"}
    assert record["tool"] == "tempo" and record["backend"] == "librosa-beat-track"
    assert record["version"].startswith("librosa-0.11")


def test_chords_recognised_with_timestamps(runner, chord_wav):
    path, names = chord_wav
    segments = runner.run("chords", str(path))["output"]
    expected = {"C major": "C:maj", "A minor": "A:min", "F major": "F:maj", "G major": "G:maj"}
    for k, name in enumerate(names):
        covering = [s for s in segments if s["start"] <= 2.0 * k + 1.0 <= s["end"]]
        assert covering and covering[0]["chord"] == expected[name], segments
    labelled = [s for s in segments if s["chord"] != "N"]
    for k in range(1, 4):  # every chord change found within 0.25 s
        assert min(abs(s["start"] - 2.0 * k) for s in labelled) <= 0.25, segments


def test_tempo_of_click_track_within_two_percent(runner, click_wav):
    path, bpm = click_wav
    output = runner.run("tempo", str(path))["output"]
    assert abs(output["bpm"] - bpm) / bpm <= 0.02, output["bpm"]
    assert len(output["beats"]) >= 8


def test_pitch_of_sine_melody_within_half_semitone(runner, melody_wav):
    path, freqs, seconds = melody_wav
    output = runner.run("pitch", str(path))["output"]
    for k, f in enumerate(freqs):
        inside = [p["hz"] for p in output["f0"] if k * seconds + 0.1 <= p["time"] <= (k + 1) * seconds - 0.1]
        assert inside, output["f0"]
        semitones = 12 * np.abs(np.log2(np.array(inside) / f))
        assert semitones.max() <= 0.5, (f, inside)
    assert [n["note"] for n in output["notes"]][:4] == ["A4", "C5", "E5", "G4"]


def _wer(reference: str, hypothesis: str) -> float:
    ref = re.findall(r"[a-z']+", reference.lower())
    hyp = re.findall(r"[a-z']+", hypothesis.lower())
    d = np.arange(len(hyp) + 1)
    for i, r in enumerate(ref, 1):
        prev, d[0] = d.copy(), i
        for j, h in enumerate(hyp, 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (r != h))
    return d[-1] / len(ref)


def test_asr_transcribes_espeak_speech(runner, speech_wav, tmp_path):
    """Corpus WER over several espeak-ng sentences and voices (errors / reference words) <= 15 %."""
    from autagent.data import synth
    from autagent.data.embedded import SENTENCES

    clips = [speech_wav]
    for k, (sentence, voice) in enumerate(zip(SENTENCES[:6], ["en-us", "en-gb", "en-us+m3"] * 2)):
        path = tmp_path / f"s{k}.wav"
        synth.write_wav(path, synth.normalise(synth.speech(sentence, voice=voice, rate=150)))
        clips.append((path, sentence))
    errors = words = 0
    for path, text in clips:
        output = runner.run("asr", str(path))["output"]
        assert output["segments"] and output["segments"][0]["start"] >= 0.0
        n = len(text.split())
        errors += _wer(text, output["text"]) * n
        words += n
    assert errors / words <= 0.15, errors / words


def test_sound_events_tell_speech_music_and_silence_apart(runner, speech_wav, music_wav, quiet_wav):
    top = {name: runner.run("sound_events", str(path))["output"]["labels"][0]["label"]
           for name, path in (("speech", speech_wav[0]), ("music", music_wav), ("quiet", quiet_wav))}
    assert top == {"speech": "Speech", "music": "Music", "quiet": "Silence"}


def test_emotion_embedded_is_labelled_as_a_prosody_estimator(runner, tmp_path):
    from autagent.data import synth
    from autagent.data.embedded import EMOTIONS

    labels = {}
    for emotion in ("sad", "happy"):
        path = tmp_path / f"{emotion}.wav"
        synth.write_wav(path, synth.normalise(synth.speech("The museum opens at nine on Sunday morning", **EMOTIONS[emotion])))
        output = runner.run("emotion", str(path))["output"]
        assert output["method"] == "prosody-prototypes" and abs(sum(output["scores"].values()) - 1) < 0.01
        labels[emotion] = output["label"]
    assert labels == {"sad": "sad", "happy": "happy"}


def test_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="unknown tool profile 'gpu'"):
        ToolRunner("gpu")

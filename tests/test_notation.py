"""The notation records are shown in: chord symbols, BPM, seconds; one line per record."""

import pytest

from autagent.reasoners.prompts import shown
from tools.notation import chord_symbol, pitch_class, render_line


@pytest.mark.parametrize(
    "label, symbol",
    [
        ("G#:maj", "Ab"),
        ("A#:min", "Bbm"),
        ("C:maj", "C"),
        ("A:min", "Am"),
        ("Db:maj", "C#"),
        ("D#:min", "Ebm"),
        ("F#:maj", "F#"),
        ("N", "no chord"),
        ("Cb:maj", "B"),
        ("weird", "weird"),
    ],
)
def test_chord_labels_are_written_as_chord_symbols(label, symbol):
    assert chord_symbol(label) == symbol


def test_every_pitch_class_has_one_spelling():
    assert {pitch_class(n) for n in ("G#", "Ab")} == {"Ab"} and pitch_class("E#") == "F"
    with pytest.raises(ValueError):
        pitch_class("H")


def test_every_reasoner_is_shown_the_notation():
    chords = {"tool": "chords", "output": [{"start": 0.0, "end": 2.04, "chord": "A#:min"}]}
    assert shown(chords)["output"] == [{"timestamp": [0.0, 2.04], "value": "Bbm"}]
    assert shown({"tool": "tempo", "output": {"bpm": 117.19, "beats": [0.5]}})["output"] == "117.2 BPM"


def test_a_record_is_one_line_in_the_notation():
    chords = {
        "tool": "chords",
        "output": [{"start": 0.0, "end": 2.04, "chord": "G#:maj"}, {"start": 2.04, "end": 4.0, "chord": "N"}],
    }
    assert render_line(chords) == "[chords] 0.0-2.0 s Ab, 2.0-4.0 s no chord"
    assert render_line({"tool": "tempo", "output": {"bpm": 96.04, "beats": []}}) == "[tempo] 96.0 BPM"
    asr = {"tool": "asr", "output": {"text": "Hi there", "segments": [{"start": 0.5, "end": 1.0, "text": "Hi there"}]}}
    assert render_line(asr) == '[asr] transcription: Hi there; segments: 0.5-1.0 s "Hi there"'
    pitch = {"tool": "pitch", "output": {"f0": [{"time": t / 10, "hz": 220.0} for t in range(12)], "notes": []}}
    line = render_line(pitch, max_items=3)
    assert line.startswith("[pitch] f0: 0.0 s 220.00 Hz, 0.1 s 220.00 Hz,") and "... 9 more" in line
    assert "notes" not in line  # an empty list says nothing

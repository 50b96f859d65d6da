"""The notation people write, for tool records as every reasoner reads them.

Analysis libraries write their own codes: madmom labels a chord ``G#:maj`` or ``A#:min``, a tempo is a
bare float, a span is two numbers.  People write ``Ab``, ``Bbm``, ``117 BPM`` and ``0.5-2.0 s``, and a
language model reading a record learned the second from text.  Each tool's ``present`` (what every
reasoner is shown, in JSON) writes its values in this notation, and :func:`render_line` writes one
presented record as one line of text (the compact layout of the cascade reasoner) — one renderer,
so no reasoner translates notation on its own.

The stored records keep what the tools computed (the cache and trained plugins stay valid); only what
a reasoner reads changes.
"""

from __future__ import annotations

import re

PITCH_CLASSES = ("C", "C#", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B")
"""One spelling per pitch class, as pop chord charts write them (sharps for C# and F#, flats elsewhere)."""
_SEMITONE = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}
_QUALITY = {"maj": "", "min": "m", "dim": "dim", "aug": "aug", "7": "7", "maj7": "maj7", "min7": "m7", "sus4": "sus4"}
NO_CHORD = "no chord"
_LABEL = re.compile(r"([A-G])([#b]?):?(\w*)")
_UNIT_AT_END = re.compile(r"\d\s*(Hz|BPM|s)$")
"""A value that carries its unit needs no key: ``520.91 Hz`` rather than ``fundamental frequency 520.91 Hz``."""


def pitch_class(name: str) -> str:
    """``G#`` or ``Ab`` -> ``Ab``: the chart spelling of a root."""
    match = re.fullmatch(r"([A-G])([#b]?)", name)
    if not match:
        raise ValueError(f"not a note name: {name!r}")
    shift = {"#": 1, "b": -1, "": 0}[match.group(2)]
    return PITCH_CLASSES[(_SEMITONE[match.group(1)] + shift) % 12]


def chord_symbol(label: str) -> str:
    """A chord label as a chord symbol: ``G#:maj`` -> ``Ab``, ``A#:min`` -> ``Bbm``, ``C`` -> ``C``,
    ``N`` (madmom's no-chord) -> ``no chord``; a label in no known form is returned unchanged."""
    label = label.strip()
    if label in ("N", "X", ""):
        return NO_CHORD
    match = _LABEL.fullmatch(label)
    if not match or match.group(3) not in _QUALITY:
        return label
    return pitch_class(match.group(1) + match.group(2)) + _QUALITY[match.group(3)]


def seconds(value: float) -> str:
    """A time: ``2.5 s``."""
    return f"{float(value):.1f} s"


def span(start: float, end: float) -> str:
    """A time span: ``0.5-2.0 s``."""
    return f"{float(start):.1f}-{float(end):.1f} s"


def bpm(value: float) -> str:
    """A tempo: ``117.2 BPM``."""
    return f"{float(value):.1f} BPM"


def hertz(value: float) -> str:
    """A frequency: ``520.9 Hz``."""
    return f"{float(value):.1f} Hz"


def _when(timestamp) -> str | None:
    if isinstance(timestamp, (int, float)) and not isinstance(timestamp, bool):
        return seconds(timestamp)
    if isinstance(timestamp, (list, tuple)) and len(timestamp) == 2:
        return span(*timestamp)
    return None


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def _item(item) -> str:
    """One presented object: its time first (``0.5-2.0 s``), then its other values; the key of a value
    that says nothing (``value``, ``text``) or that carries its unit is left out."""
    if not isinstance(item, dict):
        return _value(item)
    parts = []
    when = _when(item.get("timestamp"))
    if when:
        parts.append(when)
    for key, value in item.items():
        if key == "timestamp" or value is None:
            continue
        text = f'"{value}"' if key == "text" else _text(value)
        says_itself = key in ("value", "text", "note") or (isinstance(value, str) and _UNIT_AT_END.search(value))
        parts.append(text if says_itself else f"{key.replace('_', ' ')} {text}")
    return " ".join(parts)


def _text(node) -> str:
    if isinstance(node, dict):
        return "; ".join(
            f"{key.replace('_', ' ')}: {_text(value)}" for key, value in node.items() if value not in ([], None)
        )
    if isinstance(node, list):
        return ", ".join(_item(x) for x in node)
    return _value(node)


def render_line(record: dict, presented=None, max_items: int | None = None) -> str:
    """One record as one line: ``[tool] what it says`` in the notation above.  ``presented`` is the
    record's output as reasoners see it (default: the tool's ``present`` of the stored output); lists
    longer than ``max_items`` are cut, saying how many were left out."""
    from .registry import get_tool

    output = record.get("output") if presented is None else presented
    if presented is None and output is not None and not record.get("presented"):
        try:
            present = get_tool(record["tool"]).present
        except KeyError:
            present = None
        output = present(output) if present else output
    if max_items is not None:
        output = _cut(output, max_items)
    return f"[{record['tool']}] {_text(output)}"


def _cut(node, max_items: int):
    if isinstance(node, dict):
        return {k: _cut(v, max_items) for k, v in node.items()}
    if isinstance(node, list) and len(node) > max_items:
        return [_cut(x, max_items) for x in node[:max_items]] + [f"... {len(node) - max_items} more"]
    return node

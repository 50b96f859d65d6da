"""How the embedded reasoner reads text: tokens, numbers with units, chord and note symbols, and
tool records flattened into facts.  General reading skills only (what a text model brings from
pre-training: units, number words, music notation, counting a word, seeing a line of numbers rise
or fall); nothing here knows the embedded benchmark's vocabularies or its question kinds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

STOPWORDS = frozenset(
    "a an the of is are was be to in on at and or this that which what these those does do it its "
    "from for with by as can be heard played playing".split()
)
NUMBER_WORDS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "once": 1,
    "twice": 2,
    "single": 1,
}
ORDINALS = {"first": 1, "third": 3, "fourth": 4, "fifth": 5}  # "second" only before a person word (see tokens)
UNIT_WORDS = {
    "bpm": "bpm",
    "beats per minute": "bpm",
    "hz": "hz",
    "hertz": "hz",
    "khz": "khz",
    "seconds": "s",
    "second": "s",
    "sec": "s",
    "s": "s",
    "times": "times",
    "time": "times",
    "speakers": "speakers",
    "speaker": "speakers",
    "people": "speakers",
    "persons": "speakers",
    "person": "speakers",
    "voices": "speakers",
    "voice": "speakers",
    "talkers": "speakers",
}
KEY_UNITS = {
    "bpm": "bpm",
    "tempo": "bpm",
    "hz": "hz",
    "start": "s",
    "end": "s",
    "time": "s",
    "timestamp": "s",
    "beats": "s",
    "num_speakers": "speakers",
}
CHORD_QUALITIES = {
    "maj": "major",
    "min": "minor",
    "dim": "diminished",
    "aug": "augmented",
    "7": "seventh",
    "m": "minor",
    "": "major",
}
FLAT_TO_SHARP = {"Db": "C#", "Eb": "D#", "Gb": "F#", "Ab": "G#", "Bb": "A#", "Cb": "B", "Fb": "E"}
NOTE_INDEX = {n: i for i, n in enumerate(("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B"))}


@dataclass(frozen=True)
class Fact:
    """One thing a record (or the listener) says: words, numbers with units, and the time it covers."""

    text: str
    numbers: tuple[tuple[float, str], ...] = ()
    span: tuple[float, float] | None = None
    tolerance: float | None = None  # relative error at which its numbers agree by 1/e (None: the reader's default)
    derived: bool = False  # the reader's own conclusion (a count, a trend), not a record's text


def sharp(root: str) -> str:
    return FLAT_TO_SHARP.get(root, root)


def spoken_label(value: str) -> str:
    """Label or chord-symbol notation as words: ``A:min`` and ``Am`` -> "A minor", ``Eb:maj`` and ``Eb``
    -> "D# major", ``N`` -> "no chord"."""
    match = re.fullmatch(r"([A-G][#b]?):(\w+)", value) or re.fullmatch(r"([A-G][#b]?)(m?)", value)
    if match:
        return f"{sharp(match.group(1))} {CHORD_QUALITIES.get(match.group(2), match.group(2))}"
    return "no chord" if value == "N" else value


def read_symbols(text: str) -> str:
    """A chord symbol or chord name as words with sharps: "Dm" -> "D minor", "an Eb major chord" ->
    "an D# major chord", "F#" -> "F# major"."""
    whole = re.fullmatch(r"\s*([A-G][#b]?)(m|maj|min)?\s*", text)
    if whole:
        return f"{sharp(whole.group(1))} {CHORD_QUALITIES[whole.group(2) or '']}"
    return re.sub(r"\b([A-G])b(?= (?:major|minor))", lambda m: sharp(m.group(1) + "b"), text)


def stem(word: str) -> str:
    """A light stemmer: "falls", "falling", "fell" are not all caught, but "falls"/"falling"/"falled" are."""
    for suffix in ("ing", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def tokens(text: str) -> list[str]:
    """Lower-case stemmed word tokens, stop words dropped, number words as digits, ``S2`` also as ``2``."""
    out = []
    raw = re.findall(r"[a-z0-9#]+(?:\.[0-9]+)?", text.lower())
    for i, word in enumerate(raw):
        if word in STOPWORDS:
            continue
        if word == "second" and i + 1 < len(raw) and raw[i + 1] in ("speaker", "voice", "person", "one"):
            word = "2"
        number = NUMBER_WORDS.get(word, ORDINALS.get(word))
        out.append(str(number) if number is not None else stem(word))
        split = re.fullmatch(r"[a-z]+(\d+)", word)
        if split:
            out.append(split.group(1))
    return out


NUMBER_UNIT = re.compile(
    r"(-?\d+(?:\.\d+)?)\s*(beats per minute|bpm|khz|hz|hertz|seconds?|sec|s|times|time|speakers?|"
    r"people|persons?|voices?|talkers)?\b"
)
NOTE = re.compile(r"\b([A-G][#b]?)(\d)\b")


def numbers_with_units(text: str) -> list[tuple[float, str]]:
    """Numbers and their units ("" when none) in ``text``; number words count; a note name such as
    "A4" is its frequency in Hz."""
    found = []
    for name, octave in NOTE.findall(text):
        midi = 12 * (int(octave) + 1) + NOTE_INDEX[sharp(name)]
        found.append((440.0 * 2 ** ((midi - 69) / 12), "hz"))
    lowered = re.sub(r"\bonce\b", "1 times", re.sub(r"\btwice\b", "2 times", NOTE.sub(" ", text).lower()))
    lowered = re.sub(r"\b(" + "|".join(NUMBER_WORDS) + r")\b", lambda m: str(NUMBER_WORDS[m.group(1)]), lowered)
    for value, unit in NUMBER_UNIT.findall(lowered):
        unit = UNIT_WORDS.get(unit, "")
        value = float(value)
        found.append((value * 1000, "hz") if unit == "khz" else (value, unit))
    return found


def numeric_agreement(a: float, b: float, tolerance: float) -> float:
    if a <= 0 or b <= 0:
        return 1.0 if a == b else 0.0
    return math.exp(-abs(math.log(a / b)) / tolerance)


def _span(value) -> tuple[float, float] | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), float(value)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return float(value[0]), float(value[1])
    return None


def flatten(tool: str, node, limit: int) -> list[Fact]:
    """A record's output as facts: one per object (strings as words, numbers keyed to units, a
    ``timestamp`` or ``start``/``end`` as its span), one per bare string or number."""
    facts: list[Fact] = []

    def visit(value, key: str = ""):
        if len(facts) >= limit:
            return
        if isinstance(value, dict):
            words, numbers = [tool], []
            for k, v in value.items():
                if isinstance(v, (dict, list)) and _span(v) is None:
                    visit(v, k)
                elif isinstance(v, bool) or v is None:
                    continue
                elif isinstance(v, (int, float)):
                    unit = KEY_UNITS.get(k)
                    if unit and unit != "s":
                        words.append(k.replace("_", " "))
                    numbers.append((float(v), unit)) if unit else words.append(f"{k.replace('_', ' ')} {v}")
                elif isinstance(v, list):
                    numbers += [(x, "s") for x in _span(v)]
                else:
                    words.append(spoken_label(str(v)))
                    numbers += numbers_with_units(str(v))
            span = _span(value.get("timestamp"))
            start, end = value.get("start"), value.get("end")
            if span is None and isinstance(start, (int, float)) and isinstance(end, (int, float)):
                span = (float(start), float(end))
            if len(words) > 1 or numbers:
                facts.append(Fact(" ".join(words), tuple(numbers), span))
        elif isinstance(value, list):
            if value and all(isinstance(v, (int, float)) for v in value):
                unit = KEY_UNITS.get(key, "")
                facts.append(Fact(f"{tool} {key}", tuple((float(v), unit) for v in value if unit)))
            else:
                for item in value:
                    visit(item, key)
        elif isinstance(value, str):
            numbers = numbers_with_units(value)
            implied = KEY_UNITS.get(key or tool)
            if implied and numbers and all(unit == "" for _, unit in numbers):  # "117.19" from the tempo tool is BPM
                numbers = [(v, implied) for v, _ in numbers]
            text = spoken_label(value)
            if (
                implied
                and numbers == [(numbers[0][0], implied)]
                and re.fullmatch(r"-?[\d.]+ ?[A-Za-z]+", value.strip())
            ):
                text = f"{numbers[0][0]:.2f}"  # "117.2 BPM" reads as the bare "117.20": the unit is the tool's own
            facts.append(Fact(f"{tool} {key} {text}".strip(), tuple(numbers)))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and KEY_UNITS.get(key or tool):
            facts.append(Fact(f"{tool} {key}".strip(), ((float(value), KEY_UNITS[key or tool]),)))

    visit(node)
    return facts


QUOTED = re.compile(r"['\"‘“]([^'\"’”]+)['\"’”]")


def counted_words(question: str, facts: list[Fact]) -> list[Fact]:
    """For a word the question quotes, how many times the facts' text says it (counting, as a reader does)."""
    derived = []
    for word in QUOTED.findall(question):
        target = word.lower().strip()
        if not target or len(target.split()) > 3:
            continue
        count = sum(len(re.findall(r"\b" + re.escape(target) + r"\b", f.text.lower())) for f in facts)
        if count:
            derived.append(Fact(f"the word '{target}' is said {count} times", ((float(count), "times"),), derived=True))
    return derived


def trend(values: list[float]) -> str | None:
    """The shape of a line of numbers in time order: rising, falling, up then down, down then up."""
    if len(values) < 3:
        return None
    steps = [b - a for a, b in zip(values, values[1:]) if abs(b - a) > 1e-6]
    if not steps:
        return None
    signs = [1 if s > 0 else -1 for s in steps]
    changes = [i for i in range(1, len(signs)) if signs[i] != signs[i - 1]]
    if not changes:
        return (
            "rises: higher at the end than at the start"
            if signs[0] > 0
            else "falls: lower at the end than at the start"
        )
    if len(changes) == 1:
        return (
            "goes up then comes back down: highest in the middle"
            if signs[0] > 0
            else "goes down then comes back up: lowest in the middle"
        )
    return None


TEMPO_BANDS = ((90.0, "slow", 72.0), (125.0, "medium", 107.0), (1e9, "fast", 155.0))
REGISTER_BANDS = ((250.0, "low", 180.0), (700.0, "medium", 420.0), (1e9, "high", 1200.0))
BAND_WORDS = {"bpm": ("tempo", TEMPO_BANDS), "hz": ("pitch", REGISTER_BANDS)}


def band(value: float, bands) -> tuple[str, float]:
    """The named band a value falls in (general knowledge: tempo terms, pitch registers) and its centre."""
    for upper, words, centre in bands:
        if value < upper:
            return words, centre
    return bands[-1][1], bands[-1][2]


def banded(tool: str, facts: list[Fact]) -> list[Fact]:
    """What a reader makes of a record's tempi or frequencies: slow or fast, low or high."""
    derived = []
    for unit, (what, bands) in BAND_WORDS.items():
        values = [v for f in facts for v, u in f.numbers if u == unit and v > 0]
        if values:
            words, _ = band(float(np.median(values)), bands)
            derived.append(Fact(f"{tool}: a {words} {what}"))
    return derived


def melodic_shape(tool: str, output) -> list[Fact]:
    """A reader looking at a list of timed frequencies sees whether it climbs or drops."""
    derived = []
    for key, items in output.items() if isinstance(output, dict) else []:
        if not isinstance(items, list) or len(items) < 3 or not all(isinstance(i, dict) for i in items):
            continue
        values = []
        for item in items:
            hz = [
                n[0]
                for n in numbers_with_units(" ".join(str(v) for v in item.values() if isinstance(v, str)))
                if n[1] == "hz"
            ]
            values += hz[:1]
        shape = trend([12 * math.log2(v) for v in values if v > 0])
        if shape:
            derived.append(Fact(f"{tool} {key}: the pitch line is {shape}", derived=True))
    return derived

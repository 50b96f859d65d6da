"""The embedded benchmark: audio-question pairs generated offline from a seed, answers known by
construction, written in the MMAU test-mini JSON format.

Each question type says which tool reveals its answer (``meta.tools``) or that a listener can
answer it from the clip's gist (``meta.tools == []``).  Audio comes from espeak-ng (speech: several
voices, rates, pitches), fluidsynth with the Debian General-MIDI soundfont (instruments, chords,
melodies, drums, GM sound effects) and numpy synthesis (tones, beeps, noise).
"""
from __future__ import annotations

import json
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import synth as S
from .loaders import write_mmau
from .sample import Sample

VOICES = ("en-us", "en-gb", "en-us+m3", "en-gb-x-rp", "en-us+m7")
SENTENCES = (
    "Please remember to bring the blue umbrella tomorrow", "The museum opens at nine on Sunday morning",
    "My brother repaired the old bicycle in the garage", "We watched the sunset from the top of the hill",
    "The bakery on the corner sells fresh bread", "She forgot her keys in the taxi again",
    "The train to the airport leaves from platform four", "Our teacher told a story about a brave sailor",
    "The garden needs water after this hot week", "He plays chess with his grandfather every evening",
    "The children built a castle out of sand", "Turn left at the church and follow the river",
    "The concert was cancelled because of the storm", "I ordered soup and a green salad for lunch",
    "The library will be closed during the holiday", "A small dog was sleeping under the table",
)
KEYWORDS = ("umbrella", "museum", "bicycle", "sunset", "bakery", "taxi", "airport", "sailor", "garden",
            "chess", "castle", "river", "storm", "salad", "library", "dog")
EMOTIONS = {"neutral": dict(rate=155, pitch=40, amplitude=90), "happy": dict(rate=175, pitch=85, amplitude=120),
            "sad": dict(rate=105, pitch=15, amplitude=45), "angry": dict(rate=210, pitch=65, amplitude=200)}
EVENTS = {"birds chirping": ("gm", 123), "ocean waves": ("gm", 122), "an alarm clock ringing": ("gm", 124),
          "gunshots": ("gm", 127), "electronic beeping": ("beeps", 1000)}
INSTRUMENTS = {"violin": 40, "trumpet": 56, "flute": 73, "church organ": 19, "acoustic guitar": 24, "piano": 0}
CHORDS = {"C major": (60, 64, 67), "A minor": (57, 60, 64), "F major": (53, 57, 60), "G major": (55, 59, 62),
          "D minor": (62, 65, 69), "E minor": (52, 55, 59), "D major": (62, 66, 69), "E major": (52, 56, 59)}
NOTES = ("C4", "D4", "E4", "F4", "G4", "A4", "B4", "C5", "D5", "E5")
TEMPOS = (70, 85, 100, 115, 130, 150)
FREQUENCIES = (220, 330, 440, 550, 660, 880)


@dataclass
class Item:
    """What a question generator returns: the clip and a multiple-choice question about it."""

    audio: np.ndarray
    question: str
    choices: list[str]
    answer: str
    domain: str
    tools: list[str]
    facts: dict = field(default_factory=dict)


def _pick(rng, pool, k):
    return [pool[i] for i in rng.choice(len(pool), size=k, replace=False)]


def _options(rng, answer, pool, k=4) -> list[str]:
    others = [p for p in pool if p != answer]
    choices = [answer] + _pick(rng, others, min(k - 1, len(others)))
    rng.shuffle(choices)
    return choices


def _voice(rng) -> dict:
    return dict(voice=str(rng.choice(VOICES)), rate=int(rng.integers(140, 185)), pitch=int(rng.integers(30, 60)))


def _event_audio(rng, name: str, duration: float) -> np.ndarray:
    kind, value = EVENTS[name]
    if kind == "beeps":
        return S.beeps(duration, float(value) * rng.uniform(0.8, 1.2), on=0.2, off=float(rng.uniform(0.15, 0.4)))
    hits = [(t, t + 0.9, 60 + int(rng.integers(-5, 6)), 110) for t in np.arange(0, duration, 1.0)]
    return S.render_midi(hits, program=value, duration=duration)


# ---- question generators (one per type) ----------------------------------------------------------
def speech_quote(rng) -> Item:
    said = str(rng.choice(SENTENCES))
    return Item(S.speech(said, **_voice(rng)), "Which sentence does the speaker say?",
                _options(rng, said, SENTENCES), said, "speech", ["asr"])


def speech_keyword(rng) -> Item:
    i = int(rng.integers(len(SENTENCES)))
    return Item(S.speech(SENTENCES[i], **_voice(rng)), "Which of these words is mentioned in the speech?",
                _options(rng, KEYWORDS[i], KEYWORDS), KEYWORDS[i], "speech", ["asr"])


def speech_emotion(rng) -> Item:
    emotion = str(rng.choice(list(EMOTIONS)))
    voice = str(rng.choice(VOICES[:3]))
    audio = S.speech(str(rng.choice(SENTENCES)), voice=voice, **EMOTIONS[emotion])
    return Item(audio, "What emotion does the speaker's voice express?", _options(rng, emotion, list(EMOTIONS)),
                emotion, "speech", ["emotion"])


def speech_background(rng) -> Item:
    event = str(rng.choice(list(EVENTS)))
    speech = S.speech(str(rng.choice(SENTENCES)), **_voice(rng))
    audio = S.mix(speech, _event_audio(rng, event, len(speech) / S.SR), snr_db=float(rng.uniform(3, 8)))
    return Item(audio, "Apart from the voice, what sound can be heard in the background?",
                _options(rng, event, list(EVENTS)), event, "mixed", ["sound_events"])


def _progression(rng, names, seconds, program):
    notes = []
    for k, name in enumerate(names):
        for pitch in CHORDS[name]:
            notes.append((k * seconds, (k + 1) * seconds - 0.05, pitch, 95))
    return S.render_midi(notes, program=program, duration=len(names) * seconds)


def chord_at_time(rng) -> Item:
    names = _pick(rng, list(CHORDS), 4)
    seconds = 2.0
    k = int(rng.integers(4))
    when = round(k * seconds + rng.uniform(0.5, 1.5), 1)
    audio = _progression(rng, names, seconds, int(rng.choice([0, 24, 19])))
    choices = list(names)
    rng.shuffle(choices)
    return Item(audio, f"Which chord is played at {when} seconds?", choices, names[k], "music", ["chords"],
                {"progression": names})


def chord_quality(rng) -> Item:
    name = str(rng.choice(list(CHORDS)))
    quality = "major chord" if "major" in name else "minor chord"
    audio = _progression(rng, [name], 3.0, int(rng.choice([0, 24, 19])))
    return Item(audio, "Is the chord that is played a major or a minor chord?", ["major chord", "minor chord"],
                quality, "music", ["chords"], {"chord": name})


def _bpm_options(rng, bpm):
    return [f"{t} BPM" for t in sorted(_options(rng, bpm, list(TEMPOS)))]


def drum_tempo(rng) -> Item:
    bpm = int(rng.choice(TEMPOS))
    beat = 60.0 / bpm
    duration = 8.0
    hits = [(b * beat, b * beat + 0.1, 36 if b % 2 == 0 else 38, 115) for b in range(int(duration / beat))]
    hits += [(b * beat / 2, b * beat / 2 + 0.05, 42, 70) for b in range(int(duration / beat * 2))]
    return Item(S.render_midi(hits, drums=True, duration=duration), "What is the tempo of this drum beat?",
                _bpm_options(rng, bpm), f"{bpm} BPM", "music", ["tempo"])


def melody_tempo(rng) -> Item:
    bpm = int(rng.choice(TEMPOS))
    beat = 60.0 / bpm
    duration = 8.0
    notes = [(b * beat, b * beat + beat * 0.8, 60 + int(rng.choice([0, 2, 4, 5, 7, 9])), 100) for b in range(int(duration / beat))]
    audio = S.render_midi(notes, program=int(rng.choice([0, 24, 11])), duration=duration)
    return Item(audio, "At what tempo is this melody played?", _bpm_options(rng, bpm), f"{bpm} BPM", "music", ["tempo"])


def note_at_time(rng) -> Item:
    import librosa

    names = _pick(rng, NOTES, 4)
    seconds = 1.5
    k = int(rng.integers(4))
    notes = [(i * seconds, (i + 1) * seconds - 0.05, int(librosa.note_to_midi(n)), 100) for i, n in enumerate(names)]
    audio = S.render_midi(notes, program=int(rng.choice([73, 40, 68])), duration=4 * seconds)
    when = round(k * seconds + rng.uniform(0.4, 1.1), 1)
    choices = list(names)
    rng.shuffle(choices)
    return Item(audio, f"Which note is played at {when} seconds?", choices, names[k], "music", ["pitch"])


def tone_frequency(rng) -> Item:
    freq = int(rng.choice(FREQUENCIES))
    audio = S.tone(freq, float(rng.uniform(2.0, 4.0)), harmonics=int(rng.choice([1, 3])))
    return Item(audio, "What is the frequency of this tone?", [f"{f} Hz" for f in sorted(_options(rng, freq, list(FREQUENCIES)))],
                f"{freq} Hz", "sound", ["pitch"])


def instrument(rng) -> Item:
    name = str(rng.choice(list(INSTRUMENTS)))
    start = 55 + int(rng.integers(0, 8))
    notes = [(i * 0.5, i * 0.5 + 0.45, start + [0, 4, 7, 12, 7, 4, 0, 5][i], 100) for i in range(8)]
    audio = S.render_midi(notes, program=INSTRUMENTS[name], duration=4.5)
    return Item(audio, "Which instrument is playing?", _options(rng, name, list(INSTRUMENTS)), name, "music",
                ["sound_events"])


def event_source(rng) -> Item:
    event = str(rng.choice(list(EVENTS)))
    return Item(_event_audio(rng, event, float(rng.uniform(3.0, 5.0))), "What is the source of this sound?",
                _options(rng, event, list(EVENTS)), event, "sound", ["sound_events"])


# ---- types a listener answers from the gist, no tool needed ----------------------------------------
def _any_clip(rng) -> tuple[np.ndarray, str]:
    kind = str(rng.choice(["speech", "music", "environmental sound"]))
    if kind == "speech":
        return S.speech(str(rng.choice(SENTENCES)), **_voice(rng)), kind
    if kind == "music":
        return instrument(rng).audio, kind
    return _event_audio(rng, str(rng.choice(list(EVENTS))), 4.0), kind


def audio_kind(rng) -> Item:
    audio, kind = _any_clip(rng)
    return Item(audio, "What kind of audio is this recording?", ["speech", "music", "environmental sound"], kind,
                _domain(kind), [])


def loudness(rng) -> Item:
    audio, kind = _any_clip(rng)
    level = str(rng.choice(["very quiet", "moderately loud", "very loud"]))
    peak_db = {"very quiet": -40.0, "moderately loud": -18.0, "very loud": -1.0}[level]
    item = Item(S.normalise(audio, peak_db), "How loud is this recording?", ["very quiet", "moderately loud", "very loud"],
                level, _domain(kind), [])
    item.facts["normalised"] = True
    return item


def duration(rng) -> Item:
    seconds = int(rng.choice([2, 5, 9]))
    audio, kind = _any_clip(rng)
    audio = S.fit(np.tile(audio, 4), seconds)
    return Item(audio, "About how long is this recording?", ["2 seconds", "5 seconds", "9 seconds"],
                f"{seconds} seconds", _domain(kind), [])


def _domain(kind: str) -> str:
    return {"speech": "speech", "music": "music"}.get(kind, "sound")


QUESTION_TYPES: dict[str, Callable] = {f.__name__: f for f in (
    speech_quote, speech_keyword, speech_emotion, speech_background, chord_at_time, chord_quality, drum_tempo,
    melody_tempo, note_at_time, tone_frequency, instrument, event_source, audio_kind, loudness, duration)}


@dataclass
class EmbeddedBenchmarkConfig:
    """Sizes per split, seed and where to write; ``types`` limits the question types (all by default)."""

    root: str = "data/embedded"
    seed: int = 0
    sizes: dict = field(default_factory=lambda: {"train": 480, "dev": 96, "test": 240})
    types: list = field(default_factory=list)
    workers: int = 2


def _make_one(args) -> dict:
    root, split, index, seed, type_name = args
    rng = np.random.default_rng([seed, index, zlib.crc32(split.encode())])
    item = QUESTION_TYPES[type_name](rng)
    audio = item.audio if item.facts.get("normalised") else S.normalise(item.audio, float(rng.uniform(-12, -3)))
    sample_id = f"{split}-{index:05d}"
    path = Path(root) / "audio" / split / f"{sample_id}.wav"
    S.write_wav(path, audio)
    return dict(id=sample_id, audio=str(path.resolve()), question=item.question, choices=tuple(item.choices),
                answer=item.answer, domain=item.domain, category=type_name,
                meta={"tools": item.tools, "split": split, **item.facts})


def generate(config: EmbeddedBenchmarkConfig, progress: bool = True) -> dict[str, Path]:
    """Write ``<root>/<split>.json`` (MMAU format) and the audio; idempotent for a given config."""
    from ..progress import progress as tqdm

    root = Path(config.root)
    types = list(config.types) or list(QUESTION_TYPES)
    unknown = set(types) - set(QUESTION_TYPES)
    if unknown:
        raise ValueError(f"data.types: unknown question types {sorted(unknown)}; known: {sorted(QUESTION_TYPES)}")
    stamp = {"seed": config.seed, "sizes": config.sizes, "types": types, "version": 1}
    stamp_path = root / "benchmark.json"
    outputs = {split: root / f"{split}.json" for split in config.sizes}
    if stamp_path.exists() and json.loads(stamp_path.read_text()) == stamp and all(p.exists() for p in outputs.values()):
        return outputs
    split_seeds = {"train": 0, "dev": 1, "test": 2}
    for split, size in config.sizes.items():
        seed = config.seed * 1000 + split_seeds.get(split, len(split))
        jobs = [(str(root), split, i, seed, types[i % len(types)]) for i in range(size)]
        with ProcessPoolExecutor(max_workers=max(1, config.workers)) as pool:
            rows = list(tqdm(pool.map(_make_one, jobs, chunksize=8), total=size, desc=f"generate {split}",
                             disable=not progress))
        write_mmau([Sample(**row) for row in rows], outputs[split])
    stamp_path.write_text(json.dumps(stamp))
    return outputs

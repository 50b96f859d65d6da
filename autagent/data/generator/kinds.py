"""The embedded benchmark's question kinds: one function each, ``kind(ctx) -> Item``.

``Item.tools`` is what the generator knows: the tools whose output reveals the answer, or ``[]``
when the choices are far enough apart that a coarse listen settles it.  Within a kind both happen
(far or near options, clean or noisy speech), and in ``what_heard`` the same question and choices
need one tool or another depending on the clip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import synth
from . import vocab
from .phrasings import PHRASINGS, TRAIN_FRAMES, TRAIN_TERSE


@dataclass
class Item:
    audio: np.ndarray
    question: str
    choices: list[str]
    answer: str
    domain: str
    tools: list[str]
    facts: dict = field(default_factory=dict)


@dataclass
class Ctx:
    rng: np.random.Generator
    pool: str  # "train" (train and dev splits) or "test": phrasings, voices and sentences

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def ask(self, kind: str, phrasings=None, terse=None, **slots) -> str:
        """A phrasing of ``kind`` from this pool (or from ``phrasings``, a training-only kind's).  Training
        questions are also worded tersely and framed by context or instructions (:data:`TRAIN_FRAMES`,
        :data:`TRAIN_TERSE` or ``terse``); test questions never are."""
        question = self.pick(phrasings or PHRASINGS[kind][self.pool]).format(**slots)
        if self.pool != "train":
            return question
        terse = TRAIN_TERSE if terse is None else terse
        style = int(self.rng.integers(6))  # 0-2 plain, 3-4 framed, 5 terse
        if style == 5 and kind in terse:
            return self.pick(terse[kind])
        if style >= 3:
            return self.pick(TRAIN_FRAMES).format(q=question, lower=question[:1].lower() + question[1:])
        return question

    def voice(self, **overrides) -> dict:
        return {
            "voice": self.pick(vocab.VOICES[self.pool]),
            "rate": int(self.rng.integers(140, 185)),
            "pitch": int(self.rng.integers(25, 70)),
            **overrides,
        }

    def shuffled(self, items: list) -> list:
        items = list(items)
        self.rng.shuffle(items)
        return items


def other_options(ctx: Ctx, answer, pool, k: int, prefer=None) -> list:
    """``k`` distractors from ``pool``, taken from ``prefer`` (e.g. the answer's family) first."""
    rest = list(dict.fromkeys(p for p in pool if p != answer))
    first = ctx.shuffled([p for p in rest if prefer is None or p in prefer])
    second = ctx.shuffled([p for p in rest if p not in first])
    return (first + second)[:k]


def pick_wording(ctx: Ctx, names) -> str:
    return ctx.pick(names)


def near_or_far_item(
    ctx: Ctx,
    kind: str,
    name: str,
    names: list[str],
    far: bool,
    wordings: Callable[[str], Sequence[str]],
    audio: Callable[[], np.ndarray],
    domain: str,
    tool: str,
    about: str,
) -> Item:
    """The item of a kind whose options are near (``tool`` reveals the answer) or far (a listen settles
    it): ``names`` worded by ``wordings``, the clip ``audio()``, the facts ``{about: name, "options": ...}``.
    The draws keep one order, options worded, then the clip, then the question: the benchmark's bytes
    rest on it."""
    choices = [pick_wording(ctx, wordings(n)) for n in names]
    clip = audio()
    return Item(
        clip,
        ctx.ask(kind),
        choices,
        choices[names.index(name)],
        domain,
        [] if far else [tool],
        {about: name, "options": "far" if far else "near"},
    )


def family_item(ctx: Ctx, kind: str, table: dict, audio: Callable[[str], np.ndarray], domain: str, about: str) -> Item:
    """Which one of ``table`` (``name -> (family, ..., wordings)``) is heard: far options (40 %) are of
    other families, which a listen tells apart; near ones of the answer's family, which need sound events."""
    name = ctx.pick(list(table))
    far = ctx.rng.random() < 0.4
    alike = [n for n in table if (table[n][0] != table[name][0]) == far]
    names = ctx.shuffled([name] + other_options(ctx, name, list(table), 3, prefer=alike))
    return near_or_far_item(
        ctx,
        kind,
        name,
        names,
        far,
        wordings=lambda n: table[n][2],
        audio=lambda: audio(name),
        domain=domain,
        tool="sound_events",
        about=about,
    )


def _level(audio: np.ndarray, ctx: Ctx) -> np.ndarray:
    return synth.normalise(audio, float(ctx.rng.uniform(-12, -3)))


# ---- sounds -------------------------------------------------------------------------------------------
def event_audio(ctx: Ctx, name: str, duration: float) -> np.ndarray:
    how, value = vocab.EVENTS[name][1]
    if how == "gm":
        hits = [(t, t + 0.9, 60 + int(ctx.rng.integers(-5, 6)), 110) for t in np.arange(0, duration, 1.0)]
        return synth.render_midi(hits, program=value, duration=duration)
    if how == "crowd":
        return synth.fit(synth.crowd(duration, ctx.rng, vocab.VOICES[ctx.pool], vocab.SENTENCES[ctx.pool]), duration)
    return synth.fit(getattr(synth, how)(duration, ctx.rng), duration)


def sound_event(ctx: Ctx) -> Item:
    """Which sound event (synthesised, or a General MIDI instrument hit)."""
    return family_item(
        ctx,
        "sound_event",
        vocab.EVENTS,
        lambda name: event_audio(ctx, name, float(ctx.rng.uniform(3.0, 6.0))),
        "sound",
        "event",
    )


def animal(ctx: Ctx) -> Item:
    """Which animal: a real recording (of the split's own pool) repeated over background noise at a random
    SNR, so hearing recognises some clips and confuses others.  Far options are non-animal sounds."""
    name = ctx.pick([n for n in vocab.ANIMALS if vocab.ANIMALS[n][0][ctx.pool]])
    far = ctx.rng.random() < 0.4
    others = (
        {n: e[2] for n, e in vocab.EVENTS.items() if e[0] != "animal"}
        if far  # other kinds of sound
        else {n: a[1] for n, a in vocab.ANIMALS.items()}
    )
    wordings = others | {name: vocab.ANIMALS[name][1]}
    names = ctx.shuffled([name] + other_options(ctx, name, list(others), 3))
    choices = [pick_wording(ctx, wordings[n]) for n in names]
    answer = choices[names.index(name)]
    recording = ctx.pick(vocab.ANIMALS[name][0][ctx.pool])
    call = synth.recording(f"{vocab.RECORDINGS}/{recording}")
    duration = max(float(ctx.rng.uniform(3.0, 6.0)), len(call) / synth.SR + 0.5)
    audio = np.zeros(int(duration * synth.SR), dtype=np.float32)
    first, period = float(ctx.rng.uniform(0.1, 0.8)), len(call) / synth.SR + float(ctx.rng.uniform(0.3, 1.5))
    for start in np.arange(first, duration - 0.3, period):
        audio = synth.place(audio, call, float(start))
    background = synth.noise(len(audio) / synth.SR, ctx.rng, ctx.pick(["white", "brown"]))
    snr = float(ctx.rng.uniform(0.0, 30.0))
    return Item(
        synth.fit(synth.mix(audio, background, snr), duration),
        ctx.ask("animal"),
        choices,
        answer,
        "sound",
        [] if far else ["sound_events"],
        {"animal": name, "recording": recording, "snr_db": round(snr, 1), "options": "far" if far else "near"},
    )


def scene(ctx: Ctx) -> Item:
    name = ctx.pick(list(vocab.SCENES))
    events = ctx.shuffled(list(vocab.SCENES[name][0]))[: int(ctx.rng.integers(2, 4))]
    duration = float(ctx.rng.uniform(5.0, 8.0))
    audio = sum(synth.normalise(event_audio(ctx, e, duration), float(ctx.rng.uniform(-12, -3))) for e in events)
    names = ctx.shuffled([name] + other_options(ctx, name, list(vocab.SCENES), 3))
    choices = [pick_wording(ctx, vocab.SCENES[n][1]) for n in names]
    return Item(
        audio,
        ctx.ask("scene"),
        choices,
        choices[names.index(name)],
        "sound",
        ["sound_events"],
        {"scene": name, "events": events},
    )


def tone(ctx: Ctx) -> Item:
    far = ctx.rng.random() < 0.4
    if far:
        register = ctx.pick(["low", "high"])
        freq = float(ctx.rng.uniform(130, 260) if register == "low" else ctx.rng.uniform(1000, 1800))
        names = ctx.shuffled(list(vocab.REGISTER_WORDS))
        choices = [pick_wording(ctx, vocab.REGISTER_WORDS[n]) for n in names]
        answer = choices[names.index(register)]
    else:
        freq = float(np.round(ctx.rng.uniform(200, 1200), -1))
        ratios = ctx.shuffled([1.0, 1.12, 1.26, 0.89, 0.8])[:4]
        if 1.0 not in ratios:
            ratios[0] = 1.0
        values = [int(round(freq * r, -1)) for r in ratios]
        style = ctx.pick(["{} Hz", "about {} Hz", "{} hertz"])
        choices = [style.format(v) for v in ctx.shuffled(values)]
        answer = style.format(values[ratios.index(1.0)])
    audio = synth.tone(
        freq,
        float(ctx.rng.uniform(2.0, 4.0)),
        harmonics=int(ctx.rng.integers(1, 4)),
        decay=float(ctx.rng.uniform(0, 0.5)),
    )
    return Item(
        audio,
        ctx.ask("tone"),
        choices,
        answer,
        "sound",
        [] if far else ["pitch"],
        {"hz": freq, "options": "far" if far else "near"},
    )


# ---- music -------------------------------------------------------------------------------------------
def melody_audio(ctx: Ctx, pitches, seconds: float, program: int) -> np.ndarray:
    notes = [(i * seconds, (i + 1) * seconds - 0.05, p, 100) for i, p in enumerate(pitches)]
    return synth.render_midi(notes, program=program, duration=len(pitches) * seconds + 0.3)


def scale_tune(ctx: Ctx, program: int, lowest: int, span: int) -> np.ndarray:
    """A shuffled major scale from a random start in ``[lowest, lowest + span)``, on ``program``."""
    start = lowest + int(ctx.rng.integers(0, span))
    steps = ctx.shuffled([0, 2, 4, 5, 7, 9, 11, 12])
    return melody_audio(ctx, [start + s for s in steps], float(ctx.rng.uniform(0.35, 0.6)), program)


def instrument(ctx: Ctx) -> Item:
    """A shuffled scale on the instrument."""
    return family_item(
        ctx,
        "instrument",
        vocab.INSTRUMENTS,
        lambda name: scale_tune(ctx, vocab.INSTRUMENTS[name][1], 48, 16),
        "music",
        "instrument",
    )


def chord_name(ctx: Ctx, root: str, quality: str, style: int) -> str:
    short = root + ("m" if quality == "minor" else "")
    article = "an" if root[0] in "AEF" else "a"
    return (f"{root} {quality}", f"{article} {root} {quality} chord", short)[style]


def chords_audio(ctx: Ctx, chords, seconds: float) -> np.ndarray:
    program = ctx.pick([0, 24, 19, 46])
    notes = [
        (k * seconds, (k + 1) * seconds - 0.05, 48 + vocab.ROOTS.index(r) + i, 95)
        for k, (r, q) in enumerate(chords)
        for i in vocab.QUALITIES[q]
    ]
    return synth.render_midi(notes, program=program, duration=len(chords) * seconds)


def chord_choices(ctx: Ctx, answer, k=4):
    root, quality = answer
    pool = [(r, q) for r in vocab.ROOTS for q in vocab.QUALITIES]
    near = [(root, "minor" if quality == "major" else "major")]
    others = near + other_options(ctx, answer, [c for c in pool if c not in near], k - 2)
    return ctx.shuffled([answer] + others)


def chord(ctx: Ctx) -> Item:
    answer = (ctx.pick(vocab.ROOTS), ctx.pick(list(vocab.QUALITIES)))
    options = chord_choices(ctx, answer)
    style = int(ctx.rng.integers(3))
    choices = [chord_name(ctx, r, q, style) for r, q in options]
    audio = chords_audio(ctx, [answer], float(ctx.rng.uniform(2.5, 4.0)))
    return Item(
        audio, ctx.ask("chord"), choices, choices[options.index(answer)], "music", ["chords"], {"chord": list(answer)}
    )


def chord_at(ctx: Ctx) -> Item:
    progression = []
    while len(progression) < 4:
        c = (ctx.pick(vocab.ROOTS), ctx.pick(list(vocab.QUALITIES)))
        if c not in progression:
            progression.append(c)
    seconds = 2.0
    k = int(ctx.rng.integers(4))
    when = round(k * seconds + float(ctx.rng.uniform(0.5, 1.5)), 1)
    style = int(ctx.rng.integers(3))
    options = ctx.shuffled(progression)
    choices = [chord_name(ctx, r, q, style) for r, q in options]
    return Item(
        chords_audio(ctx, progression, seconds),
        ctx.ask("chord_at", t=when),
        choices,
        choices[options.index(progression[k])],
        "music",
        ["chords"],
        {"progression": progression, "at": when},
    )


def beat_audio(ctx: Ctx, bpm: float, duration: float) -> np.ndarray:
    beat = 60.0 / bpm
    if ctx.rng.random() < 0.5:
        hits = [(b * beat, b * beat + 0.1, 36 if b % 2 == 0 else 38, 115) for b in range(int(duration / beat))]
        hits += [(b * beat / 2, b * beat / 2 + 0.05, 42, 70) for b in range(int(duration / beat * 2))]
        return synth.render_midi(hits, drums=True, duration=duration)
    start = 55 + int(ctx.rng.integers(0, 8))
    pitches = [start + int(ctx.pick([0, 2, 4, 5, 7, 9])) for _ in range(int(duration / beat))]
    notes = [(i * beat, i * beat + beat * 0.8, p, 100) for i, p in enumerate(pitches)]
    return synth.render_midi(notes, program=ctx.pick([0, 24, 11, 13]), duration=duration)


def tempo_bpm(ctx: Ctx) -> Item:
    far = ctx.rng.random() < 0.4
    if far:
        values = ctx.shuffled(
            [int(ctx.rng.integers(60, 75)), int(ctx.rng.integers(100, 115)), int(ctx.rng.integers(150, 175))]
        )
    else:
        base = int(ctx.rng.integers(80, 150))
        values = ctx.shuffled([base, int(base * 1.1), int(base * 0.9), int(base * 1.2)])
    bpm = values[int(ctx.rng.integers(len(values)))]
    style = ctx.pick(["{} BPM", "about {} beats per minute", "{} bpm"])
    choices = [style.format(v) for v in values]
    return Item(
        beat_audio(ctx, bpm, 8.0),
        ctx.ask("tempo_bpm"),
        choices,
        style.format(bpm),
        "music",
        [] if far else ["tempo"],
        {"bpm": bpm, "options": "far" if far else "near"},
    )


def tempo_feel(ctx: Ctx) -> Item:
    feel = ctx.pick(list(vocab.TEMPO_WORDS))
    bpm = {"slow": ctx.rng.uniform(55, 75), "moderate": ctx.rng.uniform(95, 115), "fast": ctx.rng.uniform(150, 180)}[
        feel
    ]
    names = ctx.shuffled(list(vocab.TEMPO_WORDS))
    choices = [pick_wording(ctx, vocab.TEMPO_WORDS[n]) for n in names]
    return Item(
        beat_audio(ctx, float(bpm), 8.0),
        ctx.ask("tempo_feel"),
        choices,
        choices[names.index(feel)],
        "music",
        [],
        {"bpm": float(bpm), "feel": feel},
    )


def melody_contour(ctx: Ctx) -> Item:
    shape = ctx.pick(list(vocab.CONTOURS))
    n = int(ctx.rng.integers(5, 8))
    steps = np.sort(ctx.rng.choice(np.arange(1, 13), n - 1, replace=False))
    up = [0, *steps.tolist()]
    line = {
        "rising": up,
        "falling": up[::-1],
        "arch": up[: n // 2 + 1] + up[: n // 2][::-1],
        "valley": up[: n // 2 + 1][::-1] + up[1 : n // 2 + 1],
    }[shape]
    start = 55 + int(ctx.rng.integers(0, 10))
    audio = melody_audio(
        ctx, [start + p for p in line], float(ctx.rng.uniform(0.4, 0.7)), ctx.pick([0, 40, 73, 56, 11])
    )
    names = ctx.shuffled(list(vocab.CONTOURS))
    choices = [pick_wording(ctx, vocab.CONTOURS[n]) for n in names]
    return Item(
        audio, ctx.ask("melody_contour"), choices, choices[names.index(shape)], "music", ["pitch"], {"contour": shape}
    )


def note(ctx: Ctx) -> Item:
    start = 57 + int(ctx.rng.integers(0, 12))
    pitches = [start + int(x) for x in ctx.rng.choice(np.arange(0, 12), 4, replace=False)]
    seconds = 1.4
    k = int(ctx.rng.integers(4))
    when = round(k * seconds + float(ctx.rng.uniform(0.3, 1.0)), 1)
    answer = pitches[k]
    options = ctx.shuffled(
        [answer] + other_options(ctx, answer, [answer - 2, answer - 1, answer + 1, answer + 2, *pitches], 3)
    )

    def name(p):
        return f"{vocab.NOTE_NAMES[p % 12]}{p // 12 - 1}"

    audio = melody_audio(ctx, pitches, seconds, ctx.pick([73, 40, 68, 0]))
    return Item(
        audio,
        ctx.ask("note", t=when),
        [name(p) for p in options],
        name(answer),
        "music",
        ["pitch"],
        {"notes": [name(p) for p in pitches], "at": when},
    )


def _two_chords(ctx: Ctx, k: int) -> list:
    chords: list = []
    while len(chords) < k:
        c = (ctx.pick(vocab.ROOTS), ctx.pick(list(vocab.QUALITIES)))
        if c not in chords:
            chords.append(c)
    return chords


def tempo_chord(ctx: Ctx) -> Item:
    """Options cross 3 chords with 3 close tempi (10 % apart: a listener cannot tell them apart): the
    tempo and the chord tools together."""
    chords = _two_chords(ctx, 3)
    slow = int(ctx.rng.integers(85, 110))
    tempi = [slow, int(round(slow * 1.1)), int(round(slow * 1.21))]
    answer_chord, bpm = ctx.pick(chords), ctx.pick(tempi)
    beat = 60.0 / bpm
    notes = [
        (b * beat, b * beat + beat * 0.6, 48 + vocab.ROOTS.index(answer_chord[0]) + i, 95)
        for b in range(int(8.0 / beat))
        for i in vocab.QUALITIES[answer_chord[1]]
    ]
    audio = synth.render_midi(notes, program=ctx.pick([0, 24, 46]), duration=8.0)
    options = ctx.shuffled([(c, t) for c in chords for t in tempi])
    choices = [f"{chord_name(ctx, c[0], c[1], 1)} repeated at {t} BPM" for c, t in options]
    return Item(
        audio,
        ctx.ask("tempo_chord"),
        choices,
        choices[options.index((answer_chord, bpm))],
        "music",
        ["tempo", "chords"],
        {"chord": list(answer_chord), "bpm": bpm},
    )

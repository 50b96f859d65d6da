"""The embedded benchmark's music kinds: the instrument, the chord (and the chord at a moment), the tempo
(in BPM, or its feel), the melody's contour, a note, and a chord with a tempo; and the clips they share
with the other kinds (a melody, a scale, chords, a beat)."""

from __future__ import annotations

import numpy as np

from .. import synth
from . import vocab
from .kinds import Ctx, Item, family_item, other_options, pick_wording


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

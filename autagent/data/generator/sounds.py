"""The embedded benchmark's sound kinds: which sound event, which animal, which scene, which tone; and
:func:`event_audio`, the clip of a named event (the speech kinds lay it under voices)."""

from __future__ import annotations

import numpy as np

from .. import synth
from . import vocab
from .kinds import Ctx, Item, family_item, other_options, pick_wording


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

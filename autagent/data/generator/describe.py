"""``describe``: one generic question ("Which description fits the clip?") over any clip, whose
choices differ along one or two properties picked per item.

This is the kind that makes the router read its inputs: the question text never says which tool
helps.  The choices do (four sentences need ASR; four chord names the chord tool; "one person" vs
"two people" the speaker tool; an instrument crossed with a chord both tools) and so does the audio
(speech, music or another sound).  A fixed subset per question text can only serve all of these
at once, which is what calling many tools costs a distractible reasoner.  (Items a coarse listen
settles are in the other kinds: far-apart options in ``sound_event``, ``tone``, ``tempo_bpm`` ...)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import synth
from . import vocab
from .kinds import Ctx, Item, other_options, pick_wording
from .music import beat_audio, chord_choices, chord_name, chords_audio, melody_audio
from .sounds import event_audio
from .speech import NUMBER_WORDS, crossed_choices, dialogue, distinct_picks, say, sentence_pool


def _people(n: int) -> str:
    return f"{NUMBER_WORDS[n]} {'person' if n == 1 else 'people'}"


# ---- speech clips -------------------------------------------------------------------------------------
def _words(ctx: Ctx) -> tuple:
    said = distinct_picks(ctx, sentence_pool(ctx), 4)
    answer = ctx.pick(said)
    lead = ctx.pick(["someone saying: ", "a voice that says '", "a person telling you: "])
    close = "'" if lead.endswith("'") else ""
    return say(ctx, answer), [lead + s + close for s in said], lead + answer + close, ["asr"], {}


def _count(ctx: Ctx) -> tuple:
    n = int(ctx.rng.integers(1, 4))
    audio, turns = dialogue(ctx, n, int(ctx.rng.integers(max(2, n), n + 3)))
    verb = ctx.pick(["talking", "speaking", "heard speaking"])
    choices = [f"{_people(k)} {verb}" for k in range(1, 5)]
    return audio, choices, choices[n - 1], ["speakers"], {"speakers": n}


def _mood(ctx: Ctx) -> tuple:
    feeling = ctx.pick(list(vocab.EMOTION_ACTING))
    names = ctx.shuffled(list(vocab.EMOTION_ACTING))
    choices = [f"a {pick_wording(ctx, vocab.EMOTION_WORDS[n])} voice" for n in names]
    audio = say(ctx, ctx.pick(sentence_pool(ctx)), emotion=feeling)
    return audio, choices, choices[names.index(feeling)], ["emotion"], {"emotion": feeling}


def _count_words(ctx: Ctx) -> tuple:
    """One or two voices, one sentence said by the first: options cross the count with two sentences."""
    n = int(ctx.rng.integers(1, 3))
    said = distinct_picks(ctx, sentence_pool(ctx), 2)
    sentence = ctx.pick(said)
    first = say(ctx, sentence)
    if n == 2:
        reply = synth.speech(
            ctx.pick(sentence_pool(ctx)), voice=ctx.pick(vocab.VOICES[ctx.pool]), pitch=90 - ctx.voice()["pitch"]
        )
        first = synth.place(first, synth.normalise(reply, -6.0), len(first) / synth.SR + 0.4)
    choices, options = crossed_choices(ctx, [1, 2], said, lambda k, s: f"{_people(k)}, starting with '{s}'")
    return first, choices, choices[options.index((n, sentence))], ["speakers", "asr"], {"speakers": n}


# ---- music clips --------------------------------------------------------------------------------------
def _music_chord(ctx: Ctx) -> tuple:
    answer = (ctx.pick(vocab.ROOTS), ctx.pick(list(vocab.QUALITIES)))
    options = chord_choices(ctx, answer)
    choices = [f"{chord_name(ctx, r, q, 1)} being held" for r, q in options]
    audio = chords_audio(ctx, [answer], float(ctx.rng.uniform(2.5, 4.0)))
    return audio, choices, choices[options.index(answer)], ["chords"], {"chord": list(answer)}


def _music_tempo(ctx: Ctx) -> tuple:
    base = int(ctx.rng.integers(80, 150))
    values = ctx.shuffled([base, int(base * 1.1), int(base * 0.9), int(base * 1.2)])
    bpm = ctx.pick(values)
    choices = [f"a steady beat at {v} BPM" for v in values]
    return beat_audio(ctx, bpm, 8.0), choices, f"a steady beat at {bpm} BPM", ["tempo"], {"bpm": bpm}


def _one_family(ctx: Ctx, table: dict, k: int) -> list[str]:
    """The answer, then ``k - 1`` others from its family first (``table[name][0]``): a coarse listen
    cannot tell them apart."""
    name = ctx.pick(list(table))
    alike = [n for n in table if table[n][0] == table[name][0]]
    return [name] + other_options(ctx, name, list(table), k - 1, prefer=alike)


def _music_instrument(ctx: Ctx) -> tuple:
    names = _one_family(ctx, vocab.INSTRUMENTS, 4)
    answer = names[0]
    start = 48 + int(ctx.rng.integers(0, 16))
    audio = melody_audio(
        ctx, [start + s for s in ctx.shuffled([0, 2, 4, 5, 7, 9, 11, 12])], 0.45, vocab.INSTRUMENTS[answer][1]
    )
    names = ctx.shuffled(names)
    choices = [f"a tune on {pick_wording(ctx, vocab.INSTRUMENTS[n][2][1:])}" for n in names]
    return audio, choices, choices[names.index(answer)], ["sound_events"], {"instrument": answer}


def _instrument_chord(ctx: Ctx) -> tuple:
    """Options cross two instruments of one family with a chord and its parallel (major/minor)."""
    instruments = _one_family(ctx, vocab.INSTRUMENTS, 2)
    root = ctx.pick(vocab.ROOTS)
    chords = [(root, "major"), (root, "minor")]
    played, held = ctx.pick(instruments), ctx.pick(chords)
    notes = [
        (k * 0.8, k * 0.8 + 0.75, 48 + vocab.ROOTS.index(root) + i, 95)
        for k in range(4)
        for i in vocab.QUALITIES[held[1]]
    ]
    audio = synth.render_midi(notes, program=vocab.INSTRUMENTS[played][1], duration=3.4)
    words = {n: vocab.INSTRUMENTS[n][2][1] for n in instruments}
    choices, options = crossed_choices(
        ctx, instruments, chords, lambda n, c: f"{words[n]} playing {chord_name(ctx, c[0], c[1], 1)}"
    )
    return audio, choices, choices[options.index((played, held))], ["sound_events", "chords"], {"instrument": played}


# ---- other sounds -------------------------------------------------------------------------------------
def _sound_event(ctx: Ctx) -> tuple:
    family = _one_family(ctx, vocab.EVENTS, 4)
    name, names = family[0], ctx.shuffled(family)
    choices = [pick_wording(ctx, vocab.EVENTS[n][2]) for n in names]
    audio = event_audio(ctx, name, float(ctx.rng.uniform(3.0, 6.0)))
    return audio, choices, choices[names.index(name)], ["sound_events"], {"event": name}


def _sound_pitch(ctx: Ctx) -> tuple:
    freq = float(np.round(ctx.rng.uniform(250, 1200), -1))
    values = ctx.shuffled([int(round(freq * r, -1)) for r in (1.0, 1.12, 0.89, 1.26)])
    choices = [f"a steady tone at {v} Hz" for v in values]
    audio = synth.tone(freq, float(ctx.rng.uniform(2.0, 4.0)), harmonics=int(ctx.rng.integers(1, 4)))
    return audio, choices, f"a steady tone at {int(round(freq, -1))} Hz", ["pitch"], {"hz": freq}


AXES: dict[str, tuple[str, Callable]] = {  # axis -> (domain of the clip, maker)
    "words": ("speech", _words),
    "count": ("speech", _count),
    "mood": ("speech", _mood),
    "count_words": ("speech", _count_words),
    "chord": ("music", _music_chord),
    "tempo": ("music", _music_tempo),
    "instrument": ("music", _music_instrument),
    "instrument_chord": ("music", _instrument_chord),
    "event": ("sound", _sound_event),
    "pitch": ("sound", _sound_pitch),
}


def describe(ctx: Ctx) -> Item:
    axis = ctx.pick(list(AXES))
    domain, make = AXES[axis]
    audio, choices, answer, tools, facts = make(ctx)
    return Item(audio, ctx.ask("describe"), choices, answer, domain, tools, {"axis": axis, **facts})

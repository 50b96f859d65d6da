"""Question kinds about speech, mixtures, and the gist of a clip (see :mod:`.kinds` for the contract)."""

from __future__ import annotations

import zlib

import numpy as np

from .. import synth
from . import vocab
from .kinds import Ctx, Item, near_or_far_item, other_options, pick_wording
from .music import chord_name, chords_audio, melody_audio
from .phrasings import PHRASINGS
from .sounds import event_audio

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five")
TIMES = ("never", "once", "twice", "three times", "four times", "five times")


def say(ctx: Ctx, text: str, emotion: str | None = None, **voice) -> np.ndarray:
    v = ctx.voice(**voice)
    if emotion:
        act = vocab.EMOTION_ACTING[emotion]
        v = dict(
            v,
            rate=max(80, v["rate"] + act["rate"]),
            pitch=int(np.clip(v["pitch"] + act["pitch"], 0, 99)),
            amplitude=int(np.clip(100 + act["amplitude"], 10, 200)),
            word_gap=act["gap"],
        )
    return synth.speech(text, **v)


def _noisy(ctx: Ctx, speech: np.ndarray, facts: dict) -> np.ndarray:
    """Some speech comes over background noise, from clean to barely intelligible."""
    if ctx.rng.random() < 0.35:
        snr = float(ctx.rng.uniform(-3, 15))
        facts["snr_db"] = round(snr, 1)
        kind = ctx.pick(["engine", "crowd", "rain", "wind"])
        return synth.mix(speech, event_audio(ctx, kind, len(speech) / synth.SR), snr_db=snr)
    return speech


def sentence_pool(ctx: Ctx) -> tuple[str, ...]:
    return vocab.SENTENCES[ctx.pool]


def quote(ctx: Ctx) -> Item:
    said = ctx.pick(sentence_pool(ctx))
    facts: dict = {}
    audio = _noisy(ctx, say(ctx, said), facts)
    choices = ctx.shuffled([said] + other_options(ctx, said, list(sentence_pool(ctx)), 3))
    return Item(audio, ctx.ask("quote"), choices, said, "speech", ["asr"], facts)


def keyword(ctx: Ctx) -> Item:
    i = int(ctx.rng.integers(len(sentence_pool(ctx))))
    words = vocab.KEYWORDS[ctx.pool]
    facts: dict = {}
    audio = _noisy(ctx, say(ctx, sentence_pool(ctx)[i]), facts)
    choices = ctx.shuffled([words[i]] + other_options(ctx, words[i], list(words), 3))
    return Item(audio, ctx.ask("keyword"), choices, words[i], "speech", ["asr"], facts)


def word_count(ctx: Ctx) -> Item:
    word = ctx.pick(vocab.COUNT_WORDS[ctx.pool])
    n = int(ctx.rng.integers(1, 5))
    parts = []
    for k in range(n):
        parts += [ctx.pick(vocab.COUNT_FILLERS), word] if k else [word]
    style = int(ctx.rng.integers(3))
    label = [lambda x: str(x), lambda x: TIMES[x], lambda x: f"{NUMBER_WORDS[x]} times"][style]
    values = ctx.shuffled(list(range(1, 5)))
    return Item(
        say(ctx, ", ".join(parts) + "."),
        ctx.ask("word_count", w=word),
        [label(v) for v in values],
        label(n),
        "speech",
        ["asr"],
        {"word": word, "count": n},
    )


def intent(ctx: Ctx) -> Item:
    label = ctx.pick(list(vocab.INTENTS))
    said = ctx.pick(vocab.INTENTS[label][ctx.pool])
    choices = ctx.shuffled([label] + other_options(ctx, label, list(vocab.INTENTS), 3))
    return Item(say(ctx, said), ctx.ask("intent"), choices, label, "speech", ["asr"], {"utterance": said})


def emotion(ctx: Ctx) -> Item:
    feeling = ctx.pick(list(vocab.EMOTION_ACTING))
    far = ctx.rng.random() < 0.4  # far: the other options have the other arousal (a coarse listen separates them)
    other = [e for e in vocab.EMOTION_ACTING if vocab.AROUSAL[e] != vocab.AROUSAL[feeling]]
    names = ctx.shuffled([feeling] + (other if far else other_options(ctx, feeling, list(vocab.EMOTION_ACTING), 3)))
    return near_or_far_item(
        ctx,
        "emotion",
        feeling,
        names,
        far,
        wordings=vocab.EMOTION_WORDS.__getitem__,
        audio=lambda: say(ctx, ctx.pick(sentence_pool(ctx)), emotion=feeling),
        domain="speech",
        tool="emotion",
        about="emotion",
    )


# ---- several speakers ---------------------------------------------------------------------------------
def dialogue(ctx: Ctx, speakers: int, turns: int) -> tuple[np.ndarray, list[dict]]:
    """Alternating turns of distinct voices (own voice, pitch and rate each), with pauses and overlaps."""
    voices = ctx.shuffled(list(vocab.VOICES[ctx.pool]))[:speakers]
    pitches = ctx.shuffled([15, 40, 65, 90])[:speakers]
    people = [dict(voice=v, pitch=int(p), rate=int(ctx.rng.integers(140, 185))) for v, p in zip(voices, pitches)]
    order = [k % speakers for k in range(turns)] if speakers > 1 else [0] * turns
    audio = np.zeros(0, dtype=np.float32)
    truth, end = [], 0.0
    for k, who in enumerate(order):
        x = synth.normalise(synth.speech(ctx.pick(sentence_pool(ctx)), **people[who]), -6.0)
        loud = np.flatnonzero(np.abs(x) > 0.02)
        x = x[loud[0] : loud[-1]]
        start = 0.0 if k == 0 else max(end + float(ctx.rng.uniform(-0.3, 0.8)), 0.0)
        audio = synth.place(audio, x, start)
        truth.append({"start": round(start, 2), "end": round(start + len(x) / synth.SR, 2), "speaker": who + 1})
        end = start + len(x) / synth.SR
    return audio, truth


def speaker_count(ctx: Ctx) -> Item:
    n = int(ctx.rng.integers(1, 4))
    audio, turns = dialogue(ctx, n, int(ctx.rng.integers(max(2, n), n + 3)))
    style = int(ctx.rng.integers(3))
    label = [
        lambda x: str(x),
        lambda x: f"{NUMBER_WORDS[x]} {'person' if x == 1 else 'people'}",
        lambda x: f"{NUMBER_WORDS[x]} {'speaker' if x == 1 else 'speakers'}",
    ][style]
    return Item(
        audio,
        ctx.ask("speaker_count"),
        [label(v) for v in range(1, 5)],
        label(n),
        "speech",
        ["speakers"],
        {"speakers": n, "turns": turns},
    )


ORDINALS = ("first", "second", "third")


def speaker_turn(ctx: Ctx) -> Item:
    n = int(ctx.rng.integers(2, 4))
    audio, turns = dialogue(ctx, n, int(ctx.rng.integers(n + 1, n + 3)))
    turn = ctx.pick(turns[1:])
    when = round((turn["start"] + turn["end"]) / 2 + float(ctx.rng.uniform(-0.3, 0.3)), 1)
    style = int(ctx.rng.integers(3))
    label = [
        lambda k: f"speaker {k}",
        lambda k: f"the {ORDINALS[k - 1]} speaker",
        lambda k: f"the {ORDINALS[k - 1]} voice heard",
    ][style]
    return Item(
        audio,
        ctx.ask("speaker_turn", t=when),
        [label(k) for k in range(1, n + 1)],
        label(turn["speaker"]),
        "speech",
        ["speakers"],
        {"speakers": n, "turns": turns, "at": when},
    )


# ---- mixtures -------------------------------------------------------------------------------------------
def background(ctx: Ctx) -> Item:
    name = ctx.pick([e for e in vocab.EVENTS if e != "crowd"])
    speech = say(ctx, ctx.pick(sentence_pool(ctx)))
    snr = float(ctx.rng.uniform(0, 15))
    audio = synth.mix(speech, event_audio(ctx, name, len(speech) / synth.SR), snr_db=snr)
    names = ctx.shuffled([name] + other_options(ctx, name, [e for e in vocab.EVENTS if e != "crowd"], 3))
    choices = [pick_wording(ctx, vocab.EVENTS[n][2]) for n in names]
    return Item(
        audio,
        ctx.ask("background"),
        choices,
        choices[names.index(name)],
        "mixed",
        ["sound_events"],
        {"event": name, "snr_db": round(snr, 1)},
    )


def _bundles(pool: str, count: int = 4) -> list[tuple[int, list[tuple[str, object]]]]:
    """A few fixed (phrasing, options) bundles per pool, so one question text with one set of choices
    recurs over many clips: two spoken sentences and two chords."""
    rng = np.random.default_rng(zlib.crc32(("what_heard-" + pool).encode()))
    sentences = vocab.SENTENCES[pool]
    bundles = []
    for k in range(count):
        said = [sentences[i] for i in rng.choice(len(sentences), 2, replace=False)]
        chords = [(vocab.ROOTS[int(rng.integers(12))], q) for q in ("major", "minor")]
        options = [("speech", s) for s in said] + [("chord", c) for c in chords]
        order = rng.permutation(4)
        bundles.append((k, [options[i] for i in order]))
    return bundles


def what_heard(ctx: Ctx) -> Item:
    """The same question and the same choices need ASR for a speech clip and chords for a chord clip."""
    k, options = ctx.pick(_bundles(ctx.pool))

    question = PHRASINGS["what_heard"][ctx.pool][k % len(PHRASINGS["what_heard"][ctx.pool])]
    labels = [
        f"a voice saying: {v}" if kind == "speech" else f"{chord_name(ctx, v[0], v[1], 1)} played on an instrument"
        for kind, v in options
    ]
    kind, value = options[int(ctx.rng.integers(4))]
    audio = say(ctx, value) if kind == "speech" else chords_audio(ctx, [value], float(ctx.rng.uniform(2.5, 4.0)))
    answer = labels[options.index((kind, value))]
    return Item(
        audio,
        question,
        labels,
        answer,
        "speech" if kind == "speech" else "music",
        ["asr"] if kind == "speech" else ["chords"],
        {"bundle": k, "clip": kind},
    )


def distinct_picks(ctx: Ctx, pool, k: int) -> list:
    return [pool[i] for i in ctx.rng.choice(len(pool), k, replace=False)]


def crossed_choices(ctx: Ctx, first, second, label) -> tuple[list[str], list[tuple]]:
    """Every (first, second) pair as an option, in shuffled order."""
    options = ctx.shuffled([(a, b) for a in first for b in second])
    return [label(a, b) for a, b in options], options


def emotion_content(ctx: Ctx) -> Item:
    """Options cross 3 sentences with 2 emotions of equal arousal: ASR and emotion together."""
    pair = ctx.pick([("happy", "angry"), ("sad", "neutral")])
    said = distinct_picks(ctx, sentence_pool(ctx), 3)
    feeling, sentence = ctx.pick(pair), ctx.pick(said)
    words = {e: pick_wording(ctx, vocab.EMOTION_WORDS[e]) for e in pair}
    choices, options = crossed_choices(
        ctx, pair, said, lambda e, s: f"{'an' if words[e][0] in 'aeiou' else 'a'} {words[e]} voice saying: {s}"
    )
    return Item(
        say(ctx, sentence, emotion=feeling),
        ctx.ask("emotion_content"),
        choices,
        choices[options.index((feeling, sentence))],
        "speech",
        ["asr", "emotion"],
        {"emotion": feeling},
    )


def content_background(ctx: Ctx) -> Item:
    """Options cross 3 sentences with 3 background sounds: ASR and sound events together."""
    events = distinct_picks(ctx, [e for e in vocab.EVENTS if e != "crowd"], 3)
    said = distinct_picks(ctx, sentence_pool(ctx), 3)
    event, sentence = ctx.pick(events), ctx.pick(said)
    speech = say(ctx, sentence)
    audio = synth.mix(speech, event_audio(ctx, event, len(speech) / synth.SR), snr_db=float(ctx.rng.uniform(0, 6)))
    names = {e: pick_wording(ctx, vocab.EVENTS[e][2]) for e in events}
    choices, options = crossed_choices(ctx, events, said, lambda e, s: f"someone saying '{s}' over {names[e]}")
    return Item(
        audio,
        ctx.ask("content_background"),
        choices,
        choices[options.index((event, sentence))],
        "mixed",
        ["asr", "sound_events"],
        {"event": event},
    )


def quote_tone(ctx: Ctx) -> Item:
    """A recorded prompt, then a beep: options cross 3 sentences with 3 beep pitches two semitones apart
    (ASR and pitch together; a listener cannot tell the pitches apart)."""
    said = distinct_picks(ctx, sentence_pool(ctx), 3)
    base = float(np.round(ctx.rng.uniform(300, 600), -1))
    pitches = [int(base), int(round(base * 1.12, -1)), int(round(base * 1.26, -1))]
    sentence, hz = ctx.pick(said), ctx.pick(pitches)
    speech = say(ctx, sentence)
    audio = synth.place(speech, synth.normalise(synth.tone(hz, 1.2, harmonics=2), -6.0), len(speech) / synth.SR + 0.4)
    choices, options = crossed_choices(ctx, said, pitches, lambda s, p: f"'{s}', then a beep at {p} Hz")
    return Item(
        audio,
        ctx.ask("quote_tone"),
        choices,
        choices[options.index((sentence, hz))],
        "mixed",
        ["asr", "pitch"],
        {"hz": hz},
    )


# ---- the gist: a coarse listen answers these -------------------------------------------------------------
def _any_clip(ctx: Ctx, duration: float) -> tuple[np.ndarray, str]:
    kind = ctx.pick(["speech", "music", "sound"])
    if kind == "speech":
        return synth.fit(np.tile(say(ctx, ctx.pick(sentence_pool(ctx))), 3), duration), kind
    if kind == "music":
        program = vocab.INSTRUMENTS[ctx.pick(list(vocab.INSTRUMENTS))][1]
        start = 50 + int(ctx.rng.integers(0, 12))
        return synth.fit(
            melody_audio(ctx, [start + int(ctx.pick([0, 2, 4, 5, 7])) for _ in range(16)], 0.45, program), duration
        ), kind
    return event_audio(ctx, ctx.pick([e for e in vocab.EVENTS if e != "crowd"]), duration), kind


def audio_kind(ctx: Ctx) -> Item:
    audio, kind = _any_clip(ctx, float(ctx.rng.uniform(3.0, 6.0)))
    names = ctx.shuffled(list(vocab.AUDIO_KINDS))
    choices = [pick_wording(ctx, vocab.AUDIO_KINDS[n]) for n in names]
    return Item(audio, ctx.ask("audio_kind"), choices, choices[names.index(kind)], kind, [], {"kind": kind})


def duration(ctx: Ctx) -> Item:
    values = ctx.shuffled([int(ctx.rng.integers(2, 4)), int(ctx.rng.integers(6, 8)), int(ctx.rng.integers(11, 14))])
    seconds = values[int(ctx.rng.integers(3))]
    audio, kind = _any_clip(ctx, float(seconds))
    style = ctx.pick(["{} seconds", "about {} seconds", "roughly {} s"])
    return Item(
        audio,
        ctx.ask("duration"),
        [style.format(v) for v in values],
        style.format(seconds),
        kind,
        [],
        {"seconds": seconds},
    )

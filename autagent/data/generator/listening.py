"""Training-only kinds: music questions a coarse listen settles, worded as people ask about music.

The benchmark's own music kinds nearly all need a music tool (chords, tempo, pitch), so a router
trained on them learns "a music question calls the chord tool" and carries that to every question
about genre, mood, setting or instrumentation, which hearing answers.  These kinds ask exactly
those things (style and setting, mood and energy) about clips whose options are far apart, so the
reward, not a label, teaches that no tool is needed.  (A yes/no kind, "is there a flute?", was tried
and dropped: with yes/no choices only in music questions, yes/no questions about speech and sounds
got the chord tool on the transfer check, and its F1 fell; see docs/history.md.)

They are drawn for the ``train`` and ``dev`` splits only, when ``data.benchmark.listening_share`` is
above 0 (it is 0 by default): the test split, and every figure measured on it, is unchanged.  Measured
(docs/history.md): no gain on the transfer check, with the per-tool router
(``experiments/sweeps/listening.yaml``) or with ``make train``'s factored ensemble
(``experiments/sweeps/ensembles_more.yaml``), so they stay off.  Their phrasings are written for
this project; nothing comes from an evaluation benchmark or from the transfer check's questions.
"""

from __future__ import annotations

from . import vocab
from .kinds import Ctx, Item
from .music import beat_audio, scale_tune

PHRASINGS: dict[str, tuple[str, ...]] = {
    "music_style": (
        "What style of music is this?",
        "Which genre fits this piece best?",
        "How would you categorise this music?",
        "Where would you most likely hear music like this?",
        "What sort of piece is this?",
        "Which description suits the character of the music?",
        "What occasion does this music suit?",
        "Which label would a music library give this recording?",
        "If you had to file this track under one heading, which would it be?",
        "Pick the description that matches the music you hear.",
    ),
    "music_mood": (
        "What mood does this music convey?",
        "How would you describe the energy of this piece?",
        "Which feeling does the track give off?",
        "What atmosphere does the music create?",
        "Which kind of scene would this music accompany?",
        "How does this piece make a listener feel?",
        "What is the emotional character of the music?",
        "Which word sums up the vibe of this clip?",
    ),
}
TERSE = {"music_style": ("Genre?", "Style of music?"), "music_mood": ("Mood?", "Energy of the piece?")}

STYLE_FRAMES = (
    "a quiet piece for {i}",
    "a folk tune played on {i}",
    "a recital piece for {i}",
    "dance music led by {i}",
    "a film cue featuring {i}",
    "a lullaby on {i}",
    "a café background track with {i}",
)
MOODS = {  # tempo band -> (beats per minute range, wordings that name the pace and a mood)
    "slow": ((55, 75), ("slow and calm", "gentle, slow-moving and relaxed", "a slow, dreamy mood")),
    "moderate": ((100, 115), ("relaxed, at a medium pace", "easy-going, moderate pace", "a steady, medium groove")),
    "fast": ((150, 180), ("fast and energetic", "lively, fast and exciting", "a fast, upbeat party mood")),
}


def _family_choices(ctx: Ctx, k: int) -> list[str]:
    """``k`` instruments of different families (far apart, as hearing tells them)."""
    by_family: dict[str, list[str]] = {}
    for name, (family, _, _) in vocab.INSTRUMENTS.items():
        by_family.setdefault(family, []).append(name)
    return [ctx.pick(by_family[f]) for f in ctx.shuffled(list(by_family))[:k]]


def music_style(ctx: Ctx) -> Item:
    names = _family_choices(ctx, 4)
    answer = names[0]
    choices = [ctx.pick(STYLE_FRAMES).format(i=ctx.pick(vocab.INSTRUMENTS[n][2])) for n in names]
    order = ctx.shuffled(range(4))
    choices = [choices[i] for i in order]
    return Item(
        scale_tune(ctx, vocab.INSTRUMENTS[answer][1], 52, 12),
        ask(ctx, "music_style"),
        choices,
        choices[order.index(0)],
        "music",
        [],
        {"lead": answer},
    )


def music_mood(ctx: Ctx) -> Item:
    bands = ctx.shuffled(list(MOODS))
    band = bands[0]
    low, high = MOODS[band][0]
    bpm = float(ctx.rng.uniform(low, high))
    choices = [ctx.pick(MOODS[b][1]) for b in bands]
    order = ctx.shuffled(range(len(bands)))
    choices = [choices[i] for i in order]
    return Item(
        beat_audio(ctx, bpm, 8.0),
        ask(ctx, "music_mood"),
        choices,
        choices[order.index(0)],
        "music",
        [],
        {"bpm": bpm, "band": band},
    )


def ask(ctx: Ctx, kind: str, **slots) -> str:
    return ctx.ask(kind, PHRASINGS[kind], TERSE, **slots)


KINDS = {"music_style": (music_style, 4), "music_mood": (music_mood, 3)}
"""Training-only kind -> (generator, weight among them)."""

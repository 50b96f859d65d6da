"""The embedded benchmark's question kinds: one function each, ``kind(ctx) -> Item``, by what is heard
(:mod:`.sounds`, :mod:`.music`, :mod:`.speech`, :mod:`.describe`, :mod:`.listening`); here what they share:
the :class:`Item` a kind makes, the :class:`Ctx` it draws from, and the near-or-far item's shape.

``Item.tools`` is what the generator knows: the tools whose output reveals the answer, or ``[]``
when the choices are far enough apart that a coarse listen settles it.  Within a kind both happen
(far or near options, clean or noisy speech), and in ``what_heard`` the same question and choices
need one tool or another depending on the clip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

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

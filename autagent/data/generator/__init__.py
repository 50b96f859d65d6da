"""The embedded benchmark (v3): audio-question pairs generated offline from a seed, answers known by
construction, written in the MMAU test-mini JSON format.

Shaped like MMAU: about a third each of sound, music and speech questions, plus mixtures; the
question kinds real benchmarks ask (events and scenes; what is said, keywords, word counts,
intents; emotion; how many speakers and who speaks when; instruments, chords, tempo, melody and
pitch; the gist).  What makes it a testbed for tool *selection*:

* phrasings, voices and sentences of the test split come from pools training never saw;
* within a kind, some items have far-apart choices a coarse listen separates and others need a
  tool (``meta.tools == []`` marks the former);
* in ``what_heard`` one question with one set of choices needs ASR for some clips and the chord
  tool for others; in ``describe`` one generic question's choices vary along a property picked per
  item, so only the choices and the clip say which tool (or pair) helps; in ``emotion_content``,
  ``content_background``, ``tempo_chord`` and ``quote_tone`` the options cross two properties, so two
  tools are needed at once;
* in ``animal`` the clip is a real recording (Debian's tuxpaint-stamps-default; the two pools hear
  different recordings) over noise at a random SNR, so hearing names the animal on some clips and
  mishears it on others;
* audio comes from espeak-ng, fluidsynth (General-MIDI soundfont), those recordings and numpy,
  all installed by ``make setup`` from the package registries; nothing is downloaded at run time.

``meta`` of each row holds what the generator knows: ``tools``, the kind's facts, and the split.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import synth
from ..loaders import write_mmau
from ..progress import progress as tqdm
from ..sample import Sample
from . import listening
from .describe import describe
from .kinds import Ctx
from .music import chord, chord_at, instrument, melody_contour, note, tempo_bpm, tempo_chord, tempo_feel
from .sounds import animal, scene, sound_event, tone
from .speech import (
    audio_kind,
    background,
    content_background,
    duration,
    emotion,
    emotion_content,
    intent,
    keyword,
    quote,
    quote_tone,
    speaker_count,
    speaker_turn,
    what_heard,
    word_count,
)

KINDS: dict[str, tuple[Callable, float]] = {  # kind -> (generator, share of the benchmark)
    "sound_event": (sound_event, 10),
    "animal": (animal, 25),
    "scene": (scene, 5),
    "tone": (tone, 5),
    "instrument": (instrument, 7),
    "chord": (chord, 4),
    "chord_at": (chord_at, 4),
    "tempo_bpm": (tempo_bpm, 6),
    "tempo_feel": (tempo_feel, 3),
    "melody_contour": (melody_contour, 3),
    "note": (note, 3),
    "quote": (quote, 6),
    "keyword": (keyword, 4),
    "word_count": (word_count, 3),
    "intent": (intent, 4),
    "emotion": (emotion, 5),
    "speaker_count": (speaker_count, 5),
    "speaker_turn": (speaker_turn, 3),
    "background": (background, 5),
    "what_heard": (what_heard, 6),
    "emotion_content": (emotion_content, 7),
    "content_background": (content_background, 6),
    "tempo_chord": (tempo_chord, 10),
    "quote_tone": (quote_tone, 10),
    "audio_kind": (audio_kind, 3),
    "duration": (duration, 2),
    "describe": (describe, 50),
}
VERSION = 5


@dataclass
class EmbeddedBenchmarkConfig:
    """The embedded benchmark: where it is written, its seed, split sizes and question kinds."""

    root: str = "data/embedded"
    """Folder for ``<split>.json`` and ``audio/``."""
    seed: int = 0
    """Everything (kinds, audio, choices) is a function of the seed, the split and the row."""
    sizes: dict = field(default_factory=lambda: {"train": 600, "dev": 120, "test": 300})
    """Rows per split; ``test`` draws phrasings, voices and sentences from the held-out pools."""
    kinds: list = field(default_factory=list)
    """Question kinds to generate (all by default)."""
    workers: int = 2
    """Processes that synthesise audio."""
    listening_share: float = 0.0
    """Share of train and dev rows replaced by a training-only kind (:mod:`.listening`: music questions
    about style and mood that a coarse listen settles); 0, the default, is v5 as it was.  Drawn from a
    random stream of its own, so the other rows, and the whole test split, stay as they were."""
    listening_kinds: list = field(default_factory=list)
    """Which training-only kinds those rows draw from (all by default)."""

    def __post_init__(self):
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown:
            raise ValueError(f"data.benchmark.kinds: unknown kinds {unknown}; known: {sorted(KINDS)}")
        bad = {k: v for k, v in self.sizes.items() if not isinstance(v, int) or v < 0}
        if bad or not self.sizes:
            raise ValueError(f"data.benchmark.sizes must map split names to row counts >= 0, got {self.sizes}")
        unknown = sorted(set(self.listening_kinds) - set(listening.KINDS))
        if unknown:
            raise ValueError(
                f"data.benchmark.listening_kinds: unknown kinds {unknown}; known: {sorted(listening.KINDS)}"
            )
        if not 0.0 <= self.listening_share <= 1.0:
            raise ValueError(f"data.benchmark.listening_share must be in [0, 1], got {self.listening_share}")


def pool_of(split: str) -> str:
    """Which vocabulary pool a split draws from: only ``test`` uses the held-out one."""
    return "test" if split == "test" else "train"


def _make_one(args) -> dict:
    root, split, index, seed, kinds, (listening_share, listening_kinds) = args
    rng = np.random.default_rng([seed, index, zlib.crc32(split.encode())])
    table = KINDS
    if listening_share and pool_of(split) == "train":  # its own stream: the other rows are drawn as without it
        aside = np.random.default_rng([seed, index, zlib.crc32(split.encode()), 1])
        if aside.random() < listening_share:
            rng, table, kinds = aside, listening.KINDS, listening_kinds
    weights = np.array([table[k][1] for k in kinds], dtype=float)
    kind = kinds[int(rng.choice(len(kinds), p=weights / weights.sum()))]
    item = table[kind][0](Ctx(rng, pool_of(split)))
    audio = synth.normalise(item.audio, float(rng.uniform(-12, -3)))
    sample_id = f"{split}-{index:05d}"
    path = Path(root) / "audio" / split / f"{sample_id}.wav"
    synth.write_wav(path, audio)
    return dict(
        id=sample_id,
        audio=str(path.resolve()),
        question=item.question,
        choices=tuple(item.choices),
        answer=item.answer,
        domain=item.domain,
        category=kind,
        meta={"tools": item.tools, "split": split, "facts": item.facts},
    )


def generate(config: EmbeddedBenchmarkConfig, progress: bool = True) -> dict[str, Path]:
    """Write ``<root>/<split>.json`` (MMAU format) and the audio; idempotent for a given config."""
    root = Path(config.root)
    kinds = list(config.kinds) or list(KINDS)
    listening_kinds = list(config.listening_kinds) or list(listening.KINDS)
    stamp = {"seed": config.seed, "sizes": config.sizes, "kinds": kinds, "version": VERSION}
    if config.listening_share:  # v5's stamps stay valid when the training-only kinds are off
        stamp["listening"] = [config.listening_share, listening_kinds]
    stamp_path = root / "benchmark.json"
    outputs = {split: root / f"{split}.json" for split in config.sizes}
    if (
        stamp_path.exists()
        and json.loads(stamp_path.read_text()) == stamp
        and all(p.exists() for p in outputs.values())
    ):
        if not (root / DIGEST).exists():  # generated before digests were recorded
            write_digest(root)
        return outputs
    stamp_path.unlink(missing_ok=True)
    (root / DIGEST).unlink(missing_ok=True)
    aside = (config.listening_share, listening_kinds)
    with ProcessPoolExecutor(max_workers=max(1, config.workers)) as pool:  # one pool: its workers start once
        for split, size in config.sizes.items():
            jobs = [(str(root), split, i, config.seed, kinds, aside) for i in range(size)]
            rows = list(
                tqdm(pool.map(_make_one, jobs, chunksize=4), total=size, desc=f"generate {split}", disable=not progress)
            )
            write_mmau([Sample(**row) for row in rows], outputs[split])
    stamp_path.write_text(json.dumps(stamp))
    write_digest(root)
    return outputs


DIGEST = "digest.json"
"""A benchmark folder's record of its bytes: ``sha256`` of the whole (what metrics.json's ``data_digest``
holds) and of every file, so two figures can be told to come from the same data, and a changed clip found."""


def folder_digest(root: str | Path) -> dict:
    """SHA-256 of every file under ``root`` (paths relative to it, sorted; the digest record itself and
    marker files left out) and of the list of them.  The split files name their clips relative to
    themselves, so the same benchmark in two clones has the same digest."""
    root = Path(root)
    files = {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != DIGEST and not path.name.startswith(".")
    }
    whole = hashlib.sha256("".join(f"{digest}  {name}\n" for name, digest in files.items()).encode())
    return {"sha256": whole.hexdigest(), "files": files}


def write_digest(root: str | Path) -> str:
    """Write ``<root>/digest.json``; return the whole folder's SHA-256."""
    record = folder_digest(root)
    (Path(root) / DIGEST).write_text(json.dumps(record, indent=1))
    return record["sha256"]


def recorded_digest(root: str | Path) -> str | None:
    """The SHA-256 ``digest.json`` records for a benchmark folder (None when it has none)."""
    path = Path(root) / DIGEST
    return json.loads(path.read_text())["sha256"] if path.exists() else None

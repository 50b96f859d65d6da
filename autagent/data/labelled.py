"""Questions labelled with the tools whose output would reveal the answer, each on a stand-in clip of its
domain made here: the transfer set (``experiments/transfer/questions.jsonl``) that
:mod:`autagent.evaluation.selection_check` scores and the back-off's calibration phrasings
(``experiments/transfer/calibration.jsonl``) the router fits its back-off on.  JSONL rows: ``id``,
``question``, ``choices``, ``tools``, ``domain`` (speech, music, sound, mixed; anything else is mixed),
optionally ``answer`` and ``benchmark``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from . import synth
from .sample import Sample

DOMAINS = ("speech", "music", "sound", "mixed")
STAND_INS = 3
"""Stand-in clips per domain; an item takes one by a hash of its id."""
SENTENCES = (
    "The committee will meet again after the holidays.",
    "Could somebody please open the back door for me?",
    "I think the parcel arrived on Tuesday afternoon.",
)


@dataclass(frozen=True)
class Labelled:
    sample: Sample
    tools: tuple[str, ...]


def load_labelled(path: str | Path, audio_folder: str | Path) -> list[Labelled]:
    """The labelled questions, each with a stand-in clip of its domain (made once into ``audio_folder``;
    ``.cache/...``: under the per-user cache folder, the same from every folder)."""
    from .user_cache import cache_path

    path = Path(path)
    clips = stand_in_clips(Path(cache_path(audio_folder)))
    items = []
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        domain = row["domain"] if row["domain"] in DOMAINS else "mixed"
        pick = int(hashlib.sha256(str(row["id"]).encode()).hexdigest(), 16) % STAND_INS
        sample = Sample(
            id=str(row["id"]),
            audio=str(clips[domain][pick]),
            question=row["question"],
            choices=tuple(row["choices"]),
            answer=row.get("answer") or row["choices"][0],
            domain=domain,
            category=row.get("benchmark", ""),
            meta={"row": line_no},
        )
        items.append(Labelled(sample, tuple(row["tools"])))
    return items


def stand_in(domain: str, k: int):
    """The ``k``-th stand-in clip of a domain, synthesised here (espeak-ng, fluidsynth, noise): audio of
    the right kind for the router's audio features, nothing more."""
    import numpy as np

    rng = np.random.default_rng(1000 + k)
    voice = ("en-us", "en", "en-gb")[k % 3]
    if domain == "speech":
        return synth.speech(SENTENCES[k % 3], voice=voice, rate=150 + 10 * k)
    if domain == "music":
        notes = [(0.5 * i, 0.5 * i + 0.45, 55 + 2 * k + [0, 4, 7, 12, 7, 4, 0, 5][i], 100) for i in range(8)]
        return synth.render_midi(notes, program=(0, 24, 40)[k % 3], duration=4.0)
    if domain == "sound":
        return (synth.rain, synth.engine, synth.footsteps)[k % 3](4.0, rng)
    return synth.mix(synth.fit(synth.speech(SENTENCES[k % 3], voice=voice), 4.0), synth.rain(4.0, rng), 10.0)


def stand_in_clips(folder: Path) -> dict[str, list[Path]]:
    """``STAND_INS`` clips per domain in ``folder``, made once."""
    folder.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[Path]] = {d: [] for d in DOMAINS}
    for domain in DOMAINS:
        for k in range(STAND_INS):
            path = folder / f"{domain}-{k}.wav"
            if not path.exists():
                synth.write_wav(path, synth.normalise(stand_in(domain, k)))
            made[domain].append(path)
    return made

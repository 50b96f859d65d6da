"""Tool selection on questions nobody here wrote: ``autagent check-selection``.

A labelled set (``experiments/transfer/questions.jsonl``: real questions and choices from public
audio-QA benchmarks other than MMAU and MMAR, each hand-labelled with the tools whose output would
reveal the answer, none allowed) is run through a plugin's selection and through the untrained
Tools-with-Descriptions selector, over stand-in audio of each item's domain (speech, music, a sound,
a mixture) made here.  It measures transfer; it never teaches: nothing reads these texts for training
or for the benchmark generator.

Per selector, over (item, tool) pairs: precision (called tools that were labelled), recall (labelled
tools that were called), F1, calls per item, the share of the items labelled with no tool on which
nothing was called, the empty-selection rate (items on which nothing was called, and among the items
needing a tool, those left without one), and each tool's calls, labels and hits.  Tools named
``optional`` (a tool the training reasoner already hears, say) are neither credited nor penalised: they
are removed from the labels and from the calls before counting.  The same check scores a back-off's
calibration phrasings (``experiments/transfer/calibration.jsonl``, written for it, never the transfer
set's).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..data.sample import Sample

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
    """The labelled questions, each with a stand-in clip of its domain (made once into ``audio_folder``)."""
    path = Path(path)
    clips = stand_in_clips(Path(audio_folder))
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

    from ..data import synth

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
    from ..data import synth

    folder.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[Path]] = {d: [] for d in DOMAINS}
    for domain in DOMAINS:
        for k in range(STAND_INS):
            path = folder / f"{domain}-{k}.wav"
            if not path.exists():
                synth.write_wav(path, synth.normalise(stand_in(domain, k)))
            made[domain].append(path)
    return made


def score(items: list[Labelled], subsets: list[tuple[str, ...]], optional=()) -> dict:
    """Precision, recall and F1 over (item, tool) pairs, calls per item and the no-tool items left
    toolless; ``optional`` tools are removed from labels and calls first."""
    optional = set(optional)
    hits = called = needed = 0
    quiet, no_tool_items, empty, tool_items, empty_tool_items = 0, 0, 0, 0, 0
    per_tool: dict[str, dict[str, int]] = {}
    for item, subset in zip(items, subsets):
        calls = set(subset) - optional
        labels = set(item.tools) - optional
        hits += len(calls & labels)
        called += len(calls)
        needed += len(labels)
        if not item.tools:
            no_tool_items += 1
            quiet += not calls
        empty += not calls
        if labels:
            tool_items += 1
            empty_tool_items += not calls
        for tool in calls | labels:
            row = per_tool.setdefault(tool, {"called": 0, "needed": 0, "right": 0})
            row["called"] += tool in calls
            row["needed"] += tool in labels
            row["right"] += tool in calls and tool in labels
    precision = hits / called if called else 0.0
    recall = hits / needed if needed else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "calls_per_item": sum(len(set(s) - optional) for s in subsets) / max(len(items), 1),
        "no_tool_items_left_toolless": quiet / no_tool_items if no_tool_items else None,
        "empty_selections": empty / max(len(items), 1),
        "empty_on_tool_items": empty_tool_items / tool_items if tool_items else None,
        "per_tool": dict(sorted(per_tool.items())),
        "n": len(items),
    }


def check(selectors: dict, items: list[Labelled], optional=()) -> dict:
    """Every selector (name -> ``select_many(samples)``) scored on the labelled items, both ways: every
    label required, and ``optional`` tools exempt."""
    samples = [item.sample for item in items]
    out = {}
    for name, select_many in selectors.items():
        subsets = [tuple(s) for s in select_many(samples)]
        out[name] = {"all_labels": score(items, subsets), "optional_exempt": score(items, subsets, optional)}
        out[name]["optional"] = sorted(optional)
    return out


def description_selector(tool_ids):
    """The untrained Tools-with-Descriptions baseline over ``tool_ids``, as a ``select_many``."""
    from ..policies.baselines import DescriptionSelector

    selector = DescriptionSelector(tool_ids)
    return lambda samples: [selector.select(s) for s in samples]


def table(result: dict) -> str:
    lines = [
        "| selector | labels | precision | recall | F1 | calls per item | no-tool items left toolless "
        "| empty selections | empty on items needing a tool |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, both in result.items():
        for how in ("all_labels", "optional_exempt"):
            m = both[how]
            label = "all required" if how == "all_labels" else f"{', '.join(both['optional']) or 'none'} optional"
            quiet, empty = (percent(m[k]) for k in ("no_tool_items_left_toolless", "empty_on_tool_items"))
            lines.append(
                f"| {name} | {label} | {100 * m['precision']:.1f} | {100 * m['recall']:.1f} | {m['f1']:.3f} | "
                f"{m['calls_per_item']:.2f} | {quiet} | {100 * m['empty_selections']:.1f} | {empty} |"
            )
    return "\n".join(lines) + "\n"


def percent(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.1f}"


def per_tool_table(result: dict) -> str:
    """Per selector and tool, with the optional tools exempt: calls, labels, hits, precision, recall."""
    lines = ["| selector | tool | called | labelled | right | precision | recall |", "|---|---|---|---|---|---|---|"]
    for name, both in result.items():
        for tool, row in both["optional_exempt"]["per_tool"].items():
            precision = percent(row["right"] / row["called"] if row["called"] else None)
            recall = percent(row["right"] / row["needed"] if row["needed"] else None)
            lines.append(
                f"| {name} | {tool} | {row['called']} | {row['needed']} | {row['right']} | {precision} | {recall} |"
            )
    return "\n".join(lines) + "\n"

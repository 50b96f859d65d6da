"""What ``autagent select`` and ``autagent answer`` run: a plugin's choice for one clip, or for many in one
load (``select --batch``), and its answer through a reasoner.

One-off use pays for start-up, so these commands check what they were given first (every clip read
and decoded, the choices) and fail in one line before anything slow starts; then they load lazily and
say on stderr what each wait is for (``loading the plugin ... 10.2 s``), so a silent minute never
looks like a hang.  ``--explain`` prints who decided each tool (the router, the back-off on wording
unlike training, the zero-shot head for a tool added after training) with the probability that
decided, as a table for people and as JSON with ``--json``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tools.audio import AudioError, length_past, load_audio
from tools.pool import ToolPool

from .api import load, run_tools
from .data.loaders import DatasetError, read_rows
from .data.sample import Sample
from .plugin.dial import Dial, set_dial
from .plugin.manifest import read_manifest
from .reasoners import build_reasoner

AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".aif", ".aiff", ".wma", ".webm")
"""What ``select --batch DIR`` takes for a clip; other files in the folder are left alone."""
DEFAULT_MAX_SECONDS = 30.0
"""How much of a clip the check decodes when no config says (``tools.max_seconds``'s default)."""


class UsageError(ValueError):
    """Arguments that cannot work (no clip, one choice): one line ``autagent: error: ...``, exit 2."""


@dataclass(frozen=True)
class Query:
    """One clip and what is asked about it; ``where`` names it in errors (a row of a batch file)."""

    audio: str
    question: str
    choices: tuple[str, ...] = ()
    where: str = ""
    error: str = ""
    """Why the clip cannot be used (``select --batch``: that line says so, the others go on)."""
    heard_s: float | None = None
    """For a clip longer than what is heard, the seconds heard (its first ones)."""


def check_clip(path: str, max_seconds: float | None = DEFAULT_MAX_SECONDS, where: str = "") -> str:
    """``path`` resolved, once it reads and decodes as audio (missing, empty, not audio, silent: an
    :class:`tools.audio.AudioError` naming the file, and ``where`` it came from)."""
    if not str(path).strip():
        raise AudioError(where or "--audio", "no clip given")
    try:
        load_audio(path, max_seconds=max_seconds)
    except AudioError as err:
        raise AudioError(f"{where}: {err.path}" if where else err.path, err.reason) from None
    return str(Path(path).resolve())


def heard(audio: str, max_seconds: float = DEFAULT_MAX_SECONDS, quiet: bool = False) -> float | None:
    """The seconds a clip longer than ``max_seconds`` is heard for (``tools_heard_s``: its first
    ``max_seconds``), said in one line on stderr unless ``quiet``; None for a clip heard whole."""
    length = length_past(audio, max_seconds)
    if length is None:
        return None
    if not quiet:
        said = f"{length:.1f} s long" if math.isfinite(length) else f"longer than {max_seconds:g} s"
        print(
            f"autagent: note: {Path(audio).name} is {said}: only its first {max_seconds:g} s are heard "
            "(tools.max_seconds)",
            file=sys.stderr,
        )
    return max_seconds


def check_choices(choices, where: str = "--choices", required: bool = False, repeats: bool = False) -> tuple[str, ...]:
    """The answer choices, stripped: none (when not ``required``) or at least two, each different (or,
    with ``repeats``, a text listed twice kept: a benchmark file's row, as its loader keeps it)."""
    cleaned = tuple(str(c).strip() for c in choices or ())
    if not cleaned and not required:
        return ()
    if len(cleaned) < 2 or any(not c for c in cleaned):
        raise UsageError(f"{where}: give at least two non-empty answer choices, got {list(choices or [])}")
    if len(set(cleaned)) != len(cleaned) and not repeats:
        raise UsageError(f"{where}: the choices repeat one: {list(cleaned)}")
    return cleaned


def read_batch(source: str, question: str | None, choices=()) -> list[Query]:
    """``select --batch``'s queries: a JSONL or JSON-list file of ``{"audio", "question", "choices"}``
    objects (audio relative to the file; an MMAU or MMAR file's ``audio_id``/``audio_path`` do too;
    ``--question``/``--choices`` fill what a row leaves out), or a folder of clips asked the one
    ``--question``.  Every clip is checked before any is selected for; one that cannot be used is a
    query with its ``error`` (one bad clip does not stop the others), a malformed row a
    :class:`DatasetError`."""
    path = Path(source)
    if path.is_dir():
        if not question:
            raise DatasetError(path, None, None, "a folder of clips needs --question (the one asked of every clip)")
        clips = sorted(p for p in path.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES)
        if not clips:
            raise DatasetError(path, None, None, f"no audio files ({', '.join(AUDIO_SUFFIXES)}) in this folder")
        found = [Query(str(p), question, tuple(choices), f"{p.name}") for p in clips]
    else:
        found = []
        for i, row in enumerate(read_rows(path)):
            if not isinstance(row, dict):
                raise DatasetError(path, i, None, f"expected an object with audio and question, got {row!r:.80}")
            audio = row.get("audio") or row.get("audio_id") or row.get("audio_path")
            asked = row.get("question") or question
            if not isinstance(audio, str) or not audio.strip():
                raise DatasetError(path, i, "audio", "missing: the clip's path")
            if not isinstance(asked, str) or not asked.strip():
                raise DatasetError(path, i, "question", "missing (and no --question given)")
            listed = row.get("choices", list(choices))
            if not isinstance(listed, list):
                raise DatasetError(path, i, "choices", f"expected a list, got {type(listed).__name__}")
            audio = audio if Path(audio).is_absolute() else str(path.parent / audio)
            listed = check_choices(listed, f"{path}, row {i}, field 'choices'", repeats=True)
            found.append(Query(audio, asked, listed, f"row {i}"))
        if not found:
            raise DatasetError(path, None, None, "no rows")
    where = str(path) + (", " if not path.is_dir() else "/")
    return [_checked(q, f"{where}{q.where}" if not path.is_dir() else "") for q in found]


def _checked(query: Query, where: str) -> Query:
    """``query`` with its clip resolved, or with the reason it cannot be used."""
    try:
        audio = check_clip(query.audio, where=where)
        return Query(audio, query.question, query.choices, heard_s=heard(audio, quiet=True))
    except AudioError as err:
        return Query(query.audio, query.question, query.choices, error=str(err))


@contextmanager
def waiting(what: str):
    """Say on stderr what the command waits for, and how long it took, on one line."""
    print(f"autagent: {what} ...", end="", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        yield
    except BaseException:
        print(" failed", file=sys.stderr, flush=True)
        raise
    print(f" {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


def load_plugin(directory, **kwargs):
    """:func:`autagent.api.load`, saying what it waits for (the encoders: a few seconds on a CPU); a folder
    that is no plugin, or not the pinned one, is refused before that."""
    read_manifest(directory, kwargs.get("expected_sha256"))
    with waiting(f"loading the plugin {directory} (its text and audio encoders)"):
        return load(directory, **kwargs)


def selection(plugin, query: Query) -> dict:
    """``{"tools", "probabilities", "explain"}`` of one query; a plugin that cannot explain itself (the LM
    agent writes a list) gives its tools alone."""
    if not hasattr(plugin, "explain"):
        return {"tools": list(plugin.select(query.audio, query.question, query.choices))}
    explained = plugin.explain(query.audio, query.question, query.choices)
    tools = [tool for tool, entry in explained["tools"].items() if entry["called"]]
    probabilities = {tool: entry["probability"] for tool, entry in explained["tools"].items()}
    return {"tools": tools, "probabilities": probabilities, "explain": explained}


DECIDERS = {
    "router": "the router (the question, choices and clip, as trained)",
    "back-off": "the back-off (wording unlike training)",
    "zero-shot head": "the zero-shot head (a tool added after training, scored from its description)",
}


def explain_table(reply: dict) -> str:
    """``select --explain`` for people: the tools called, then per tool who decided and the probability
    that decided (called where above 0.50), beside the router's and the zero-shot head's own."""
    explained = reply.get("explain")
    lines = [f"tools called: {', '.join(reply['tools']) or 'none'}"]
    if not explained:
        return "\n".join([*lines, "(this plugin writes its list; it has no per-tool probabilities to show)"])
    inputs = explained.get("inputs") or {}
    for name, entry in inputs.items():
        state = "unfamiliar" if entry["unfamiliar"] else "familiar"
        lines.append(f"{name}: {state} (cosine {entry['nearest_training_cosine']:.2f} to the nearest training query)")
    backoff = explained.get("backoff")
    if backoff and explained.get("unfamiliar_inputs"):
        rule = (
            "p = (router + zero-shot head) / 2"
            if backoff["rule"] == "vote"
            else "the zero-shot head's p where the router calls nothing"
        )
        lines.append(
            f"back-off ({backoff['rule']}): {rule}; the head's logits shifted by {backoff['offset']:+.2f}, "
            "the cut calibrated after training"
        )
    rows = [("tool", "called", "decided by", "p", "router p", "zero-shot p")]
    for tool, entry in explained["tools"].items():
        rows.append(
            (
                tool,
                "yes" if entry["called"] else "no",
                entry["decided_by"],
                f"{entry['probability']:.2f}",
                _probability(entry.get("router_probability")),
                _probability(entry.get("zero_shot_probability")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["", *("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows), ""]
    used = dict.fromkeys(entry["decided_by"] for entry in explained["tools"].values())
    lines.append("p: the probability that decided; a tool is called where p > 0.50. Decided by:")
    lines += [f"  {who}: {DECIDERS.get(who, who)}" for who in used]
    return "\n".join(lines)


def _probability(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def batch_lines(plugin, queries: list[Query], explain: bool) -> list[dict]:
    """``select --batch``: one record per query, every selection in one pass of the plugin; a query whose
    clip cannot be used is a record with its ``error`` instead of ``tools``."""
    usable = [q for q in queries if not q.error]
    samples = [
        Sample(id=str(i), audio=q.audio, question=q.question, choices=q.choices, answer="")
        for i, q in enumerate(usable)
    ]
    chosen = iter(plugin.select_many(samples) if samples else [])
    out = []
    for query in queries:
        line = {"audio": query.audio, "question": query.question, "choices": list(query.choices)}
        if query.error:
            out.append({**line, "error": query.error})
            continue
        line["tools"] = list(next(chosen))
        if query.heard_s is not None:
            line["tools_heard_s"] = query.heard_s
        if explain and hasattr(plugin, "explain"):
            line["explain"] = plugin.explain(query.audio, query.question, query.choices)
        out.append(line)
    return out


def run_select(args) -> int:
    """``autagent select``: check, load, select; the JSON reply (one line), the table with ``--explain``,
    or JSON lines with ``--batch``."""
    choices = check_choices(args.choices)
    if args.batch:
        queries = read_batch(args.batch, args.question, choices)
    else:
        if not args.audio or not args.question:
            raise UsageError("select needs --audio and --question (or --batch FILE|DIR)")
        audio = check_clip(args.audio)
        queries = [Query(audio, args.question, choices, heard_s=heard(audio))]

    dial = Dial(
        getattr(args, "max_tools", None), getattr(args, "latency_budget_ms", None), getattr(args, "dial_tools", None)
    )
    plugin = load_plugin(args.plugin, tools_profile=args.profile, expected_sha256=args.plugin_sha256)
    if getattr(args, "uncertified", False) and hasattr(plugin, "dial"):
        plugin.dial = None  # the trained threshold, not the certified point
    plugin = set_dial(plugin, dial)  # a bad dial was refused above, before loading
    if args.batch:
        with waiting(f"selecting for {len(queries)} clips"):
            lines = batch_lines(plugin, queries, args.explain)
        for line in lines:
            print(json.dumps(line, ensure_ascii=False))
        long = sum(q.heard_s is not None for q in queries)
        if long:
            print(
                f"autagent: note: {long} of {len(queries)} clips are longer than {DEFAULT_MAX_SECONDS:g} s: only "
                'their first seconds are heard (their lines say "tools_heard_s")',
                file=sys.stderr,
            )
        failed = sum(bool(q.error) for q in queries)
        if failed:
            print(
                f'autagent: {failed} of {len(queries)} clips could not be used: their lines say why ("error")',
                file=sys.stderr,
            )
        return 1 if failed else 0
    reply = selection(plugin, queries[0])
    if queries[0].heard_s is not None:
        reply["tools_heard_s"] = queries[0].heard_s
    if args.explain and not args.json:
        print(explain_table(reply))
    else:
        if not args.explain:
            reply.pop("explain", None)
        print(json.dumps(reply, ensure_ascii=False))
    return 0


def run_answer(args, config, audio: str, choices: tuple[str, ...]) -> int:
    """``autagent answer`` once the clip and the choices are checked (:func:`check_clip`,
    :func:`check_choices`): load the plugin, select, run the tools, ask the reasoner; one JSON line."""
    config.tools, extra = run_tools(config.tools, read_manifest(args.plugin, args.plugin_sha256))
    heard_s = heard(audio, config.tools.max_seconds) if config.tools.max_seconds else None
    plugin = load_plugin(
        args.plugin,
        tools_profile=config.tools.profile,
        tool_settings=config.tools.settings,
        expected_sha256=args.plugin_sha256,
        extra_tools=extra,
    )
    sample = Sample(id="cli", audio=audio, question=args.question, choices=choices, answer=choices[0])
    with waiting("choosing the tools (the clip's audio profile on its first use)"):
        tools = plugin.select(sample.audio, sample.question, sample.choices)
    records = None
    if tools:
        where = "on Ray actors" if config.tools.executor == "ray" else "in this process"
        with waiting(f"running {', '.join(tools)} {where} (a model's first call loads it)"):
            pool = ToolPool(config.tools)
            try:
                records = list(pool.run(sample.audio, tools).values())
            finally:
                pool.shutdown()
    with waiting(f"loading the {config.reasoner.kind} reasoner"):
        reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
    try:
        with waiting("asking it"):
            (reply,) = reasoner.ask([(sample, records)])
    finally:
        reasoner.close()
    out = {"tools": tools, "records": records or [], "answer": reply.text}
    if heard_s is not None:
        out["tools_heard_s"] = heard_s
    if reply.error:
        out["error"] = reply.error
    if reply.note:  # e.g. records cut to fit the cascade model's context
        out["note"] = reply.note
    print(json.dumps(out, ensure_ascii=False))
    return 0 if reply.error is None else 1

#!/usr/bin/env python
"""A fuzz corpus of bad and odd inputs, driven through the public CLI and API (prints figures; the
test suite runs it too).

Categories: audio files, dataset rows, configs, LM policy completions, reasoner replies from an
OpenAI-compatible server, and plugin folders.  Every input must end in a clear error naming the
file, row or field (an expected exception type, or exit code 1/2 with ``autagent: error``), or be
handled as data; never a traceback.  Batches must complete with every row counted.

    python tests/helpers/fuzz_corpus.py [--fast] [--keep DIR]

prints ``inputs``, ``crashes`` (must be 0) and ``rows_lost`` (must be 0), per category and in all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Tally:
    inputs: int = 0
    crashes: list = field(default_factory=list)
    rows_lost: int = 0

    def record(self, name: str, ok: bool, detail: str = "") -> None:
        self.inputs += 1
        if not ok:
            self.crashes.append(f"{name}: {detail[-400:]}")


def _expected():
    from autagent.config import ConfigError
    from autagent.data.loaders import DatasetError
    from autagent.plugin.trust import PluginError
    from tools.audio import AudioError
    from tools.registry import ToolRegistryError

    return (ConfigError, DatasetError, PluginError, AudioError, ToolRegistryError)


def guarded(tally: Tally, name: str, call) -> object:
    """Run ``call``; an expected error type is a clear error, anything else a crash."""
    try:
        result = call()
    except _expected():
        tally.record(name, True)
        return None
    except Exception:  # noqa: BLE001 - this is what we are counting
        tally.record(name, False, traceback.format_exc())
        return None
    tally.record(name, True)
    return result


IN_PROCESS = False
"""Run the command line in this process (``main(args)`` with its output captured) instead of a new
Python per input: what the fast subset does, since a subprocess only adds the interpreter's start."""


def cli(
    tally: Tally, name: str, args: list[str], env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    if IN_PROCESS:
        out = cli_in_process(args, env)
    else:
        out = subprocess.run(
            [sys.executable, "-m", "autagent.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    clean = out.returncode in (0, 1, 2) and "Traceback" not in out.stderr
    clean = clean and (
        out.returncode == 0 or "autagent: error" in out.stderr or out.stdout.strip().startswith(("{", "["))
    )
    tally.record(name, clean, f"exit {out.returncode}: {out.stderr}")
    return out


def cli_in_process(args: list[str], env: dict | None) -> subprocess.CompletedProcess:
    """``autagent.cli.main(args)`` with stdout and stderr captured; an exception that escapes it is a
    traceback, as it would be in a process of its own."""
    import contextlib
    import io
    import logging

    from autagent.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    handler = logging.StreamHandler(stderr)
    logging.getLogger().addHandler(handler)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse's usage errors
                code = exit_.code if isinstance(exit_.code, int) else 2
            except Exception:  # noqa: BLE001 - an escaped exception is what the corpus counts
                traceback.print_exc()
                code = 1
    finally:
        logging.getLogger().removeHandler(handler)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(args, code, stdout.getvalue(), stderr.getvalue())


# ---- audio ------------------------------------------------------------------------------------------------
def audio_corpus(folder: Path, fast: bool) -> dict[str, Path]:
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    sr, rng = 16000, np.random.default_rng(0)
    tone = (0.5 * np.sin(2 * np.pi * 440 * np.arange(sr * 2) / sr)).astype(np.float32)
    files: dict[str, Path] = {}

    def wav(name, data, rate=sr, subtype="PCM_16", fmt=None):
        files[name] = folder / name
        sf.write(str(files[name]), data, rate, subtype=subtype, format=fmt)

    def raw(name, data: bytes):
        files[name] = folder / name
        files[name].write_bytes(data)

    wav("ok.wav", tone)
    raw("empty.wav", b"")
    raw("truncated.wav", (folder / "ok.wav").read_bytes()[:1000])
    raw("header_only.wav", (folder / "ok.wav").read_bytes()[:44])
    raw("random.wav", rng.bytes(20000))
    raw("text.wav", b"this is not audio at all\n" * 100)
    raw("json.wav", b'{"audio": "no"}')
    files["directory.wav"] = folder / "directory.wav"
    files["directory.wav"].mkdir(exist_ok=True)
    files["missing.wav"] = folder / "missing.wav"
    raw("unreadable.wav", (folder / "ok.wav").read_bytes())
    os.chmod(files["unreadable.wav"], 0)  # root reads it anyway: then it is simply data
    wav("nan.wav", np.full(sr, np.nan, np.float32), subtype="FLOAT")
    wav("inf.wav", np.concatenate([tone[:sr], np.full(100, np.inf, np.float32)]), subtype="FLOAT")
    wav("silence.wav", np.zeros(sr * 2, np.float32))
    wav("dc.wav", np.full(sr, 0.3, np.float32))
    wav("stereo.wav", np.stack([tone, -tone], 1))
    wav("eight_channels.wav", np.stack([tone] * 8, 1))
    wav("rate_1khz.wav", tone[::16], rate=1000)
    wav("rate_192khz.wav", np.repeat(tone, 12), rate=192000)
    wav("five_ms.wav", tone[:80])
    wav("one_sample.wav", tone[:1])
    wav("clipped.wav", np.clip(tone * 20, -1, 1))
    wav("square_full_scale.wav", np.sign(tone))
    wav("float64.wav", tone.astype(np.float64), subtype="DOUBLE")
    wav("pcm24.wav", tone, subtype="PCM_24")
    wav("u8.wav", tone, subtype="PCM_U8")
    wav("noise.wav", rng.standard_normal(sr * 2).astype(np.float32) * 0.3)
    wav("flac.flac", tone, fmt="FLAC")
    wav("ogg.ogg", tone, fmt="OGG", subtype="VORBIS")
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-y", "-i", str(files["ok.wav"]), str(folder / "mp3.mp3")], check=False
    )
    files["mp3.mp3"] = folder / "mp3.mp3"
    raw("mp3_named_wav.wav", files["mp3.mp3"].read_bytes() if files["mp3.mp3"].exists() else b"")
    raw("wav_named_mp3.mp3", (folder / "ok.wav").read_bytes())
    header = bytearray((folder / "ok.wav").read_bytes())
    header[40:44] = (0xFFFFFFF0).to_bytes(4, "little")  # data chunk claims 4 GB
    raw("lying_header.wav", bytes(header))
    raw("null_bytes.wav", bytes(5000))
    files["fifo.wav"] = folder / "fifo.wav"
    if not files["fifo.wav"].exists():
        os.mkfifo(files["fifo.wav"])
    files["link_to_ok.wav"] = folder / "link_to_ok.wav"
    if not files["link_to_ok.wav"].exists():
        os.symlink(files["ok.wav"], files["link_to_ok.wav"])
    files["dangling_link.wav"] = folder / "dangling_link.wav"
    if not files["dangling_link.wav"].is_symlink():
        os.symlink(folder / "nowhere.wav", files["dangling_link.wav"])
    raw("odd name ü 🎵.wav", (folder / "ok.wav").read_bytes())
    if not fast:
        wav("one_hour.wav", np.tile((tone[:8000] * 0.1).astype(np.float32), 3600 * 2)[: 3600 * 8000], rate=8000)
    return files


def drive_audio(tally: Tally, files: dict[str, Path], folder: Path, fast: bool) -> None:
    from autagent.data.sample import Sample
    from autagent.reasoners.embedded import EmbeddedReasoner
    from tools.pool import PoolConfig, ToolPool

    tools = ["tempo", "pitch", "sound_events", "speakers"] + ([] if fast else ["asr", "emotion", "chords"])
    pool = ToolPool(
        PoolConfig(
            executor="local",
            cache_dir=str(folder / "cache"),
            enabled=["asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers"],
        )
    )
    paths = [str(p) for p in files.values()]
    results = guarded(tally, "audio: tool pool batch", lambda: pool.run_many(paths, tools))
    if results is not None and len(results) != len(paths):
        tally.rows_lost += abs(len(paths) - len(results))
    reasoner = EmbeddedReasoner()
    for name, path in files.items():
        sample = Sample(
            id=name, audio=str(path), question="What can be heard?", choices=("speech", "music"), answer="music"
        )
        guarded(tally, f"audio {name}: reasoner", lambda s=sample: reasoner.answer_many([(s, None)]))
    for name in list(files)[: 3 if fast else len(files)]:
        cli(
            tally,
            f"audio {name}: tools run",
            [
                "tools",
                "run",
                str(files[name]),
                "--tools",
                "tempo",
                "--executor",
                "local",
                "--set",
                f"tools.cache_dir={folder / 'cli-cache'}",
            ],
        )


# ---- dataset rows -------------------------------------------------------------------------------------------
BASE_ROWS = {
    "mmau": {"id": "x", "audio_id": "a.wav", "question": "q?", "choices": ["a", "b"], "answer": "a", "task": "sound"},
    "mmar": {
        "id": "x",
        "audio_path": "a.wav",
        "question": "q?",
        "choices": ["a", "b"],
        "answer": "a",
        "modality": "sound",
    },
    "avqa": {"id": 1, "audio_path": "a.wav", "question_text": "q?", "multi_choice": ["a", "b"], "answer": 0},
}


def row_variants(fmt: str) -> list[tuple[str, object]]:
    base = BASE_ROWS[fmt]
    out: list[tuple[str, object]] = [("valid", base)]
    for key in base:
        out.append((f"missing {key}", {k: v for k, v in base.items() if k != key}))
        for bad in (None, 7, 3.5, True, [], {}, "", "   "):
            out.append((f"{key}={bad!r}", {**base, key: bad}))
    choices = "multi_choice" if fmt == "avqa" else "choices"
    out += [
        ("empty choices", {**base, choices: []}),
        ("one choice", {**base, choices: ["a"]}),
        ("duplicate choices", {**base, choices: ["a", "a", "b"]}),
        ("empty last choice", {**base, choices: ["a", "b", ""]}),
        ("huge question", {**base, ("question_text" if fmt == "avqa" else "question"): "q" * 1_000_000}),
        ("odd unicode", {**base, ("question_text" if fmt == "avqa" else "question"): "مرحبا 🎵 \u200b\u202e x\u0000y"}),
        ("nested junk", {**base, "extra": {"deep": [[[{"a": 1}]]]}}),
        ("row is a number", 42),
        ("row is null", None),
        ("row is a list", [1, 2]),
        ("row is a string", "text"),
    ]
    if fmt != "avqa":
        out += [
            ("answer not a choice", {**base, "answer": "zzz"}),
            ("answer with spaces", {**base, "answer": " a\n"}),
            ("list category", {**base, "category": ["Reasoning", "Perception"]}),
        ]
    else:
        out += [("answer index out of range", {**base, "answer": 9}), ("answer index negative", {**base, "answer": -1})]
    return out


def drive_datasets(tally: Tally, folder: Path, fast: bool) -> None:
    from autagent.data.loaders import load

    folder.mkdir(parents=True, exist_ok=True)
    for fmt in BASE_ROWS:
        variants = row_variants(fmt)
        rows = [v for _, v in variants] + [BASE_ROWS[fmt]]  # the last duplicates the first id
        as_list = folder / f"{fmt}.json"
        as_list.write_text(json.dumps(rows))
        lines = folder / f"{fmt}.jsonl"
        lines.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken json line\n\n")
        for path, expected_rows in ((as_list, len(rows)), (lines, len(rows) + 1)):
            loaded = guarded(tally, f"rows {path.name}: load", lambda p=path, f=fmt: load(p, f))
            if loaded is not None and len(loaded.samples) != expected_rows:
                tally.rows_lost += abs(expected_rows - len(loaded.samples))
            if fast and fmt != "mmar":
                continue
            out = cli(tally, f"rows {path.name}: data validate", ["data", "validate", str(path), "--format", fmt])
            try:
                report = json.loads(out.stdout)
                tally.rows_lost += abs(expected_rows - report["loaded"] - len(report["rejected"]))
            except (json.JSONDecodeError, KeyError):
                tally.record(f"rows {path.name}: validate output", False, out.stdout[:200])
        for name, row in variants:  # each odd row alone, as a one-row JSON list
            single = folder / f"{fmt}-single.json"
            single.write_text(json.dumps([row]))
            loaded = guarded(tally, f"rows {fmt} {name}", lambda p=single, f=fmt: load(p, f))
            if loaded is not None and len(loaded.samples) != 1:
                tally.rows_lost += 1
    for name, data in (
        ("empty file", b""),
        ("not utf-8", b"\xff\xfe\x00junk"),
        ("bom", b"\xef\xbb\xbf[]"),
        ("top-level object", b'{"a": 1}'),
        ("truncated list", b'[{"id": 1},'),
        ("binary", bytes(range(256))),
    ):
        path = folder / "odd.json"
        path.write_bytes(data)
        guarded(tally, f"file {name}: load", lambda p=path: load(p))
        if not fast:
            cli(tally, f"file {name}: data validate", ["data", "validate", str(path)])


# ---- configs -------------------------------------------------------------------------------------------------
CONFIGS = [
    "grpo: {lr: 0.1}",
    "grpo: {steps: -1}",
    "grpo: {steps: 1.5}",
    "grpo: {steps: ten}",
    "grpo: {group_size: 1}",
    "grpo: {temperature: 0}",
    "grpo: {advantage: mean}",
    "grpo: {loss_type: ppo}",
    "policy: {lm: {loss_type: ppo}}",
    "table: {budget: 10}",
    "policy: {router: {table: {budget: 0}}}",
    "policy: {router: {objective: expected}}",
    "policy: {router: {credit: each}}",
    "policy: {router: {learning_rate: -0.1}}",
    "grpo: {inner_epochs: 0}",
    "grpo: {learning_rate: -0.1}",
    "grpo: {beta: -1}",
    "grpo: {clip_epsilon: .nan}",
    "grpo: []",
    "grpo: 3",
    "policy: {kind: transformer}",
    "policy: {router: {inputs: [smell]}}",
    "policy: {router: {inputs: []}}",
    "policy: {router: {hidden: 0}}",
    "policy: {lm: {learning_rte: 1}}",
    "policy: {lm: {learning_rate: 0}}",
    "policy: {lm: {extra_args: {loss_type: dapo}}}",
    "reward: {kind: shaped}",
    "reward: {tool_cost: high}",
    "reasoner: {kind: gpt5}",
    "reasoner: {embedded: {attention_temperature: 0}}",
    "reasoner: {openai: {audio_format: mp3}}",
    "reasoner: {openai: {max_retries: -1}}",
    "eval_reasoner: {kind: nope}",
    "eval: {methods: [no_tool, oracle]}",
    "eval: {methods: single:whisper}",
    "eval: {methods: [single:whisper]}",
    "tools: {enabled: [asr, whisper]}",
    "tools: {enabled: [asr, asr]}",
    "tools: {replicas: {asr: 0}}",
    "tools: {batch_size: {asr: -2}}",
    "tools: {settings: {speakers: {}}}",
    "tools: {executor: spark}",
    "tools: {profile: gpu}",
    "tools: {timeout_s: 0}",
    "tools: {extra: [no_such_module:TOOL]}",
    "tools: {extra: [notacolon]}",
    "tools: {extra: [os:path]}",
    "data: {dev_fraction: 1.5}",
    "data: {format: csv}",
    "data: {limit_test: 0}",
    "data: {benchmark: {sizes: {train: -1}}}",
    "data: {benchmark: {kinds: [karaoke]}}",
    "launcher: {kind: slurm}",
    "logging: {wandb_mode: sometimes}",
    "name: ../escape",
    "checkpoint_every: 0",
    "unknown_top: 1",
    "- a list",
    "just a string",
    ": : :",
    "{unclosed",
    "\t\ttabs: [",
    "seed: [1, 2]",
]


def drive_configs(tally: Tally, folder: Path, fast: bool) -> None:
    from autagent.config import load_config

    folder.mkdir(parents=True, exist_ok=True)
    for k, text in enumerate(CONFIGS):
        path = folder / f"config{k}.yaml"
        path.write_text(text + "\n")
        result = guarded(tally, f"config {text!r}: load", lambda p=path: load_config(p))
        if result is not None:
            tally.record(f"config {text!r}: accepted", False, "an invalid config loaded without an error")
    for text in CONFIGS[: 2 if fast else 8]:
        path = folder / "cli.yaml"
        path.write_text(text + "\n")
        out = cli(
            tally, f"config {text!r}: train", ["train", "--config", str(path), "--set", f"output_dir={folder}/runs"]
        )
        if out.returncode != 2:
            tally.record(f"config {text!r}: exit code", False, f"exit {out.returncode}")
    cli(tally, "config: --set without =", ["train", "--set", "grpo.steps"])
    cli(tally, "config: missing file", ["train", "--config", str(folder / "none.yaml")])


# ---- LM completions ------------------------------------------------------------------------------------------
COMPLETIONS = [
    "",
    " ",
    "<answer>",
    "</answer>",
    "<answer>1",
    "<answer>1,2,3,4,5,6,7</answer>",
    "<answer>-1</answer>",
    "<answer>1.5</answer>",
    "<answer>1e3</answer>",
    "<answer>99999999999999999999</answer>",
    "<answer>a;b;c</answer>",
    "<answer>type0</answer>",
    "<answer>typeX</answer>",
    "<answer>,,,</answer>",
    "<answer>\u0661</answer>",
    "<answer>١,٢</answer>",
    "<ANSWER>NONE</ANSWER>",
    "<answer><answer>1</answer></answer>",
    "<answer>1</answer>" * 50,
    "x" * 100_000,
    "<answer>" + "1," * 10_000 + "</answer>",
    "\x00<answer>1</answer>",
    "<answer>🎵</answer>",
    "<answer>ALL</answer>",
    "<answer>1 and 3</answer>",
    "<answer>A, b , type3</answer>",
    "<think>hmm</think><answer>2</answer>",
    "<answer>\n1\n</answer>",
    "<answer>None of them</answer>",
    "null",
]


def drive_completions(tally: Tally) -> None:
    from autagent.policies.lm.prompt import parse_selection

    tools = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")
    for text in COMPLETIONS:
        selection = guarded(tally, f"completion {text[:30]!r}", lambda t=text: parse_selection(t, tools))
        if selection is not None and (
            not set(selection.tools) <= set(tools) or (not selection.valid and selection.tools)
        ):
            tally.record(f"completion {text[:30]!r}: result", False, repr(selection))


# ---- reasoner replies ----------------------------------------------------------------------------------------
def drive_server(tally: Tally, folder: Path, clip: Path) -> None:
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from autagent.data.sample import Sample
    from autagent.reasoners import CachedReasoner, OpenAIConfig, answer_key
    from autagent.reasoners.openai_compat import OpenAIReasoner

    behaviours = {
        "ok": (200, b'{"choices": [{"message": {"content": "a"}}]}'),
        "junk": (200, b"junk"),
        "html": (200, b"<html>x</html>"),
        "empty": (200, b""),
        "empty json": (200, b"{}"),
        "null content": (200, b'{"choices": [{"message": {"content": null}}]}'),
        "list content": (200, b'{"choices": [{"message": {"content": [{"type": "text", "text": "a"}]}}]}'),
        "number content": (200, b'{"choices": [{"message": {"content": 5}}]}'),
        "choices empty": (200, b'{"choices": []}'),
        "500": (500, b"boom"),
        "502": (502, b""),
        "429": (429, b""),
        "401": (401, b"no"),
        "404": (404, b""),
        "huge": (200, b'{"choices": [{"message": {"content": "' + b"a" * 2_000_000 + b'"}}]}'),
        "slow stream": ("slow", b'{"choices": [{"message": {"content": "a"}}]}'),
        "hang": ("hang", b""),
        "reset": ("reset", b""),
        "half body": ("half", b'{"choices": [{"message": {"content": "a"}}]}'),
        "wrong length": ("length", b'{"choices": []}'),
    }

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            key = body["messages"][0]["content"][1]["text"].split("Question: ")[1].split("\n")[0]
            status, data = behaviours[key]
            if status == "hang":
                time.sleep(1.5)
                return
            if status == "reset":
                self.connection.close()
                return
            self.send_response(200 if not isinstance(status, int) else status)
            length = len(data) + (100 if status == "length" else 0)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if status == "slow":
                for byte in data:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.003)
            elif status == "half":
                self.wfile.write(data[: len(data) // 2])
            else:
                self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        config = OpenAIConfig(
            base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1",
            max_retries=1,
            timeout_s=0.5,
            max_concurrency=8,
        )
        cached = CachedReasoner(OpenAIReasoner(config), folder / "answers")
        samples = [Sample(id=k, audio=str(clip), question=k, choices=("a", "b"), answer="a") for k in behaviours]
        replies = guarded(tally, "reasoner replies: batch", lambda: cached.ask([(s, None) for s in samples]))
        if replies is not None:
            tally.rows_lost += abs(len(replies) - len(samples))
            for key, reply in zip(behaviours, replies):
                tally.record(f"reply {key}", reply.text is None or isinstance(reply.text, str), repr(reply)[:100])
            cached.close()
            stored = (folder / "answers").glob("*.jsonl")
            failed = {k for k, r in zip(behaviours, replies) if r.error}
            answered = {k for k, r in zip(behaviours, replies) if not r.error}
            keys = {answer_key(s, None) for s in samples if s.question in failed}
            written = [json.loads(line) for p in stored for line in p.read_text().splitlines()]
            tally.record(
                "replies: failures never cached",
                not keys & {row["key"] for row in written}  # no failed call stored as an answer
                and len(written) == len(answered)
                and cached.failures == len(failed),
                f"{cached.failures} failures for {sorted(failed)}; {len(written)} stored for {len(answered)} answered",
            )
    finally:
        httpd.shutdown()


# ---- plugin folders ------------------------------------------------------------------------------------------
def drive_plugins(tally: Tally, folder: Path, fast: bool) -> None:
    import shutil

    import torch

    from autagent.api import load
    from autagent.plugin.manifest import PluginTarget
    from autagent.plugin.trust import content_hash, file_digest
    from autagent.policies.router.export import RouterParts, export_router
    from autagent.policies.router.features import Featurizer
    from autagent.policies.router.model import Router, RouterConfig

    featurizer = Featurizer(RouterConfig())
    good = export_router(
        PluginTarget(
            folder / "good", ("asr", "emotion", "chords", "tempo", "pitch", "sound_events"), "embedded", {}, 30.0, {}
        ),
        RouterParts(Router(featurizer.dim, RouterConfig(), 6), featurizer),
    )
    pinned = json.loads((good / "manifest.json").read_text())["content_hash"]

    def variant(name, change, rehash=True):
        path = folder / name.replace(" ", "_")
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(good, path, symlinks=True)
        manifest = json.loads((path / "manifest.json").read_text())
        change(path, manifest)
        if rehash and isinstance(manifest, dict):
            manifest["content_hash"] = content_hash(manifest)
        if manifest is not None:
            (path / "manifest.json").write_text(json.dumps(manifest))
        return path

    def flip(path, m):
        data = bytearray((path / "model.safetensors").read_bytes())
        data[len(data) // 2] ^= 0x01
        (path / "model.safetensors").write_bytes(bytes(data))

    def rehashed_edit(path, m):
        flip(path, m)
        digest, size = file_digest(path / "model.safetensors")
        m["files"]["model.safetensors"] = {"sha256": digest, "size": size}

    def add(name, entry=None):
        return lambda path, m: m["files"].update({name: entry or {"sha256": "0" * 64, "size": 1}})

    def extra(path, m):
        (path / "extra.json").write_text("{}")

    def symlink(path, m):
        (path / "model.safetensors").rename(path / "real.safetensors")
        os.symlink(path / "real.safetensors", path / "model.safetensors")

    def device(path, m):
        os.symlink("/dev/zero", path / "dev.json")
        add("dev.json")(path, m)

    def huge(path, m):
        with open(path / "huge.safetensors", "wb") as handle:
            handle.truncate(80 << 30)  # sparse: 80 GB claimed, nothing read
        add("huge.safetensors", {"sha256": "0" * 64, "size": 80 << 30})(path, m)

    def pickle_file(path, m):
        torch.save({"x": 1}, path / "model.pt")
        add("model.pt")(path, m)

    cases = [
        ("flipped byte", flip, True),
        ("flipped byte, not rehashed", flip, False),
        ("rehashed edit", rehashed_edit, True),
        ("dotdot", add("../outside.json"), True),
        ("absolute", add("/etc/hostname"), True),
        ("nested dotdot", add("a/../../x.json"), True),
        ("symlink", symlink, True),
        ("device", device, True),
        ("huge", huge, True),
        ("missing", lambda p, m: (p / "model.safetensors").unlink(), True),
        ("extra file", extra, True),
        ("pickle", pickle_file, True),
        ("files is a list", lambda p, m: m.update(files=["model.safetensors"]), True),
        ("size is text", lambda p, m: m["files"]["model.safetensors"].update(size="big"), True),
        ("no files", lambda p, m: m.update(files={}), True),
        ("format", lambda p, m: m.update(format="zip"), True),
        ("version", lambda p, m: m.update(format_version=99), True),
        ("tools missing", lambda p, m: m.update(tools=[{"id": "laser"}]), True),
        ("policy kind", lambda p, m: m.update(policy="oracle"), True),
        ("empty manifest", lambda p, m: m.clear(), False),
        ("weights of another shape", lambda p, m: m.update(input_dim=5), True),
    ]
    for name, change, rehash in cases:
        path = variant(name, change, rehash)
        result = guarded(tally, f"plugin {name}: load", lambda p=path: load(p))
        if result is not None and name not in ("rehashed edit",):
            tally.record(f"plugin {name}: accepted", False, "a bad plugin loaded")
        if name == "rehashed edit":
            pinned_result = guarded(
                tally, "plugin rehashed edit: pinned", lambda p=path: load(p, expected_sha256=pinned)
            )
            if pinned_result is not None:
                tally.record("plugin rehashed edit: pinned accepted", False, "")
        if not fast or name in ("dotdot", "symlink", "rehashed edit"):
            cli(tally, f"plugin {name}: verify", ["plugin", "verify", str(path)])
        else:
            from autagent.api import verify

            report = guarded(tally, f"plugin {name}: verify", lambda p=path: verify(p))
            if report is not None and report["ok"] and name != "rehashed edit":
                tally.record(f"plugin {name}: verified", False, "a bad plugin passed verify")
    for name, data in (("manifest not json", b"{nope"), ("manifest binary", bytes(range(256)))):
        path = variant(name, lambda p, m: None)
        (path / "manifest.json").write_bytes(data)
        guarded(tally, f"plugin {name}: load", lambda p=path: load(p))
    guarded(tally, "plugin: not a folder", lambda: load(folder / "good" / "model.safetensors"))
    guarded(tally, "plugin: missing folder", lambda: load(folder / "absent"))


def run(fast: bool = False, keep: str | None = None, in_process: bool = False) -> dict:
    global IN_PROCESS
    IN_PROCESS = in_process
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    root = Path(keep or tempfile.mkdtemp(prefix="autagent-fuzz-"))
    tallies = {name: Tally() for name in ("audio", "rows", "configs", "completions", "replies", "plugins")}
    files = audio_corpus(root / "audio", fast)
    drive_audio(tallies["audio"], files, root / "audio-run", fast)
    drive_datasets(tallies["rows"], root / "rows", fast)
    drive_configs(tallies["configs"], root / "configs", fast)
    drive_completions(tallies["completions"])
    drive_server(tallies["replies"], root / "replies", files["ok.wav"])
    drive_plugins(tallies["plugins"], root / "plugins", fast)
    summary = {
        name: {"inputs": t.inputs, "crashes": len(t.crashes), "rows_lost": t.rows_lost, "first_crashes": t.crashes[:5]}
        for name, t in tallies.items()
    }
    summary["all"] = {
        "inputs": sum(t.inputs for t in tallies.values()),
        "crashes": sum(len(t.crashes) for t in tallies.values()),
        "rows_lost": sum(t.rows_lost for t in tallies.values()),
    }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="skip the one-hour clip and the slow tools")
    parser.add_argument("--keep", help="write the corpus here instead of a temporary folder")
    args = parser.parse_args()
    summary = run(args.fast, args.keep)
    for name, row in summary.items():
        print(f"{name:12s} inputs {row['inputs']:4d}   crashes {row['crashes']:3d}   rows lost {row['rows_lost']:3d}")
        for crash in row.get("first_crashes", []):
            print("    ", crash.splitlines()[-1][:200])
    sys.exit(0 if summary["all"]["crashes"] == 0 and summary["all"]["rows_lost"] == 0 else 1)


if __name__ == "__main__":
    main()

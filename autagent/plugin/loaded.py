"""A plugin at work: :class:`Plugin` selects tools for a clip and a question, runs them through the same
pool and content-addressed cache as training, and writes their records into chat messages exactly as
evaluation shows them to a reasoner (``autagent serve`` calls the same code, so its upstream prompt and
this class's are the same bytes); :meth:`Plugin.stream` does it on a clip that is still arriving.

It holds a policy's plugin object already opened.  Opening a folder (which opens the policy that wrote
it, a layer above this package) is :meth:`autagent.api.Plugin.load`'s: ``from autagent import Plugin``
gives that subclass, with everything here.
"""

from __future__ import annotations

import copy
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from tools.audio import content_hash as clip_hash
from tools.audio import without_paths
from tools.pool import ToolPool

from ..reasoners.messages import BadRequest, ChatQuery, read_query, with_records
from .dial import Dial, set_dial
from .stream_session import StreamSession


@dataclass
class Augmented:
    """What :meth:`Plugin.augment_query` did: the messages to send on, the tools chosen, the tools
    whose record failed (dropped), and the time each stage took."""

    messages: list
    tools: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


class Plugin:
    """A policy's plugin object (``plugin``: its ``select``, and a router's ``probabilities``, ``explain``,
    ``featurizer``, ``dial``), its verified manifest, the pool its tools run on, the folder a chat's clips
    are stored in and the largest clip taken."""

    def __init__(self, plugin, manifest: dict, pool: ToolPool, audio_dir: Path, max_audio_bytes: int):
        self.plugin, self.manifest, self.pool = plugin, manifest, pool
        self.audio_dir, self.max_audio_bytes = Path(audio_dir), max_audio_bytes

    @property
    def content_hash(self) -> str:
        return self.manifest["content_hash"]

    @property
    def tools(self) -> list[str]:
        return list(self.plugin.tools)

    def select(self, audio: str, question: str, choices=()) -> list[str]:
        return list(self.plugin.select(str(audio), question, tuple(choices)))

    def set_dial(
        self,
        max_tools: int | None = None,
        latency_budget_ms: float | None = None,
        tools: int | None = None,
        uncertified: bool = False,
    ) -> Plugin:
        """Set every selection's operating point (:mod:`autagent.plugin.dial`): exactly the ``tools`` most
        probable tools, at most ``max_tools`` of the threshold's, and/or the tools whose measured seconds
        fit ``latency_budget_ms``; none of them: the plugin's certified point (``uncertified``: its trained
        threshold)."""
        dial = Dial(max_tools, latency_budget_ms, tools)
        if uncertified and hasattr(self.plugin, "dial"):
            self.plugin.dial = None
        set_dial(self.plugin, dial)
        return self

    @property
    def certificate(self) -> dict | None:
        """What ``autagent adapt --certify`` certified (the point, its margin, items and interval), or None."""
        return self.manifest.get("certificate")

    def probabilities(self, audio: str, question: str, choices=()) -> dict[str, float] | None:
        """Each tool's probability of being called (a router's; None for an LM agent, which writes a list)."""
        probabilities = getattr(self.plugin, "probabilities", None)
        return probabilities(str(audio), question, tuple(choices)) if probabilities else None

    def explain(self, audio: str, question: str, choices=()) -> dict | None:
        """Why these tools: unfamiliar inputs and, per tool, probabilities and whether the back-off decided
        (a router's; None for an LM agent)."""
        explain = getattr(self.plugin, "explain", None)
        return explain(str(audio), question, tuple(choices)) if explain else None

    def read(self, messages, choices=None) -> ChatQuery:
        """The clip (stored by content), question and choices of a chat request."""
        query = read_query(messages, choices, self.audio_dir, self.max_audio_bytes)
        if query.remote:
            raise BadRequest("the clip is a remote URL: fetch it and send it as input_audio or a data: URL")
        return query

    def augment_query(self, messages, query: ChatQuery) -> Augmented:
        """Select for ``query``, run the tools, and add the records that came back to ``messages``; a
        tool that fails is dropped and named, never the request.  With no tool chosen (or none that
        worked), the messages go on unchanged."""
        started = time.perf_counter()
        tools = self.select(query.audio, query.question, query.choices)
        seconds = {"select": time.perf_counter() - started}
        if not tools:
            return Augmented(copy.deepcopy(messages), [], {}, seconds)
        started = time.perf_counter()
        records = self.pool.run(query.audio, tools)
        seconds["tools"] = time.perf_counter() - started
        failed = {t: without_paths(r["error"], query.audio) for t, r in records.items() if "error" in r}
        good = [r for r in records.values() if "error" not in r]
        augmented = with_records(messages, good) if good else copy.deepcopy(messages)
        return Augmented(augmented, tools, failed, seconds)

    # -- a clip that is still arriving (autagent.plugin.stream_session) ------------------------------
    def stream(
        self, sample_rate: int = 24000, max_seconds: float | None = None, listeners=(), store=None, executor=None
    ):
        """A :class:`autagent.plugin.stream_session.StreamSession`: feed 16-bit PCM chunks, ask the question whenever
        it comes, commit, and get the records when ready (what ``/v1/realtime`` runs on); at most
        ``max_seconds`` of audio (default: what the tools hear, ``tools.max_seconds``); ``listeners``
        hear the clip as it arrives too (a reasoner's ear); ``store`` holds the committed clip (a
        service's bounded folder), ``executor`` runs the session's work (a service's bounded pool)."""
        seconds = max_seconds or self.pool.config.max_seconds
        return StreamSession(self, sample_rate, seconds, listeners=listeners, store=store, executor=executor)

    def warm(self) -> None:
        """Load every tool's model and run it once on a synthetic clip (librosa's kernels compiled, the
        first request pays nothing extra); the records are not cached."""
        t = np.arange(2 * 16000) / 16000
        tone = (0.3 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 2 * t) > 0)).astype(np.float32)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "warm.wav"
            sf.write(str(path), tone, 16000)
            for tool_id in self.pool.tool_ids:
                self.pool.runner.run(tool_id, str(path))
            self.select(str(path), "warm up", ["a", "b"])

    @property
    def reads_audio(self) -> bool:
        """Whether the selection reads the clip (a router with audio among its inputs; an LM agent)."""
        featurizer = getattr(self.plugin, "featurizer", None)
        return featurizer is None or featurizer.audio is not None

    def prime_audio(self, path: str, probs, samples_16k) -> None:
        """Give the router the clip's profile from YAMNet's probabilities already computed as it arrived."""
        featurizer = getattr(self.plugin, "featurizer", None)
        if featurizer is not None and featurizer.audio is not None:
            featurizer.audio.prime(path, probs, samples_16k)

    def remember(self, path: str, records) -> None:
        """Keep records computed outside the pool in its cache, under the clip's content and the record's
        own version (a streamed equivalent's ends in ``+stream``)."""
        key = clip_hash(path)
        for record in records:
            self.pool.cache.put(key, record["tool"], record["backend"], record["version"], record)

    def augment(self, messages, choices=None) -> list:
        """``messages`` with the chosen tools' records in front of the last user message's text (a copy;
        the input is not changed)."""
        return self.augment_query(messages, self.read(messages, choices)).messages

"""The plugin on a clip that is still arriving: feed chunks, ask the question whenever it comes, get
the records when the clip ends (``Plugin.stream()``; ``autagent serve``'s ``/v1/realtime`` is built on it).

    session = plugin.stream(sample_rate=24000)
    session.ask("What is the tempo?", ["70 BPM", "120 BPM"])     # before, during or after the audio
    for chunk in pcm16_chunks:
        session.feed(chunk)                                        # tools start on the audio so far
    session.commit()                                               # the clip is complete
    result = session.result().result()                             # a Future -> tools, records, seconds
    messages = result.messages(user_text)                          # what /v1/chat/completions would send on

As soon as the question is known (and, for a plugin whose router reads the clip, a second of audio
has come), the plugin selects and the selected tools start on the audio received so far
(:mod:`tools.arriving`); once the clip is complete and the question known, the plugin selects again
on the whole clip (the very selection the clip posted whole gets) and only the tools' tails are left
to compute.  With no question by the time the result is asked for, the clip's own transcript is the
question.  One worker per session does the work (a thread of its own, or of the executor given:
a service bounds them); :meth:`StreamSession.close` stops it between one tool and the next and drops
the audio, :meth:`StreamSession.join` waits for it to stop.  With a ``store`` (a service's bounded
clips folder) the committed clip is written and held there in one step; the result's consumer
releases it (the session does, when closed before the result is taken).
"""

from __future__ import annotations

import base64
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tools.arriving import ClipStream, ClipTooLong, PatchScores, wav_bytes
from tools.audio import without_paths
from tools.yamnet import YamNet

from ..reasoners.messages import store_audio, with_records

__all__ = ["ClipTooLong", "SessionClosed", "StreamResult", "StreamSession"]


class SessionClosed(RuntimeError):
    """The session was closed while its work ran: the work stopped between one tool and the next."""


@dataclass
class StreamResult:
    """What a committed clip gave: the clip (stored by content), the question, the tools selected
    (first on the audio so far, then on the whole clip), the records (tool order) and the failed ones,
    and the seconds each stage took (``*_after_commit`` is what the clip's end waited for)."""

    audio: str
    question: str
    choices: tuple[str, ...]
    tools: list[str]
    records: list[dict]
    failed: dict[str, str] = field(default_factory=dict)
    first_tools: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def before_commit_share(self) -> float:
        """How much of the tools' work was done before the clip ended (0 to 1)."""
        before = self.seconds.get("tools_before_commit", 0.0)
        total = before + self.seconds.get("tools_after_commit", 0.0)
        return before / total if total > 0 else 0.0

    def messages(self, text: str) -> list:
        """The chat messages a client posting the clip whole with ``text`` would send, with the records
        in front of the text exactly as ``/v1/chat/completions`` adds them."""
        data = base64.b64encode(Path(self.audio).read_bytes()).decode()
        clip = {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
        messages = [{"role": "user", "content": [clip, {"type": "text", "text": text}]}]
        good = [r for r in self.records if "error" not in r]
        return with_records(messages, good) if good else messages


class StreamSession:
    """One clip arriving for one plugin (see the module's docstring)."""

    def __init__(
        self,
        plugin,
        sample_rate: int = 24000,
        max_seconds: float = 30.0,
        step_seconds: float = 0.5,
        select_after_seconds: float = 1.0,
        listeners=(),
        peek_seconds: float = 1.5,
        store=None,
        executor=None,
    ):
        self.plugin, self.sample_rate, self.max_seconds = plugin, sample_rate, max_seconds
        self.listeners = list(listeners)
        """Others that hear the clip as it arrives (a reasoner's ear: ``rate``, ``feed(samples)``,
        ``finish(samples, path)`` and, optionally, ``peek(records)``: the tools' provisional records every
        ``peek_seconds`` of audio, to start reading them); one that fails is dropped, the session goes on."""
        self.peek_samples, self._peeked = int(peek_seconds * sample_rate), 0
        self.step_samples = int(step_seconds * sample_rate)
        self.select_after = int(select_after_seconds * sample_rate)
        self.clip = ClipStream(plugin.pool.runner, sample_rate, max_seconds)
        self.question: tuple[str, tuple[str, ...]] | None = None
        self.first_tools: list[str] | None = None
        self.tools_seconds = 0.0
        self._profile = self._profile_runner()
        self._cv = threading.Condition()
        self._stepped = 0
        self._committed = False
        self._done: Future | None = None
        self._closed = False
        self.store = store
        self._stopped = threading.Event()
        if executor is not None:
            executor.submit(self._work)
        else:
            threading.Thread(target=self._work, name="autagent-stream", daemon=True).start()

    # -- the caller's side ------------------------------------------------------------------------
    def ask(self, question: str, choices=()) -> None:
        """The question and its choices (any time before the result; the last one asked counts)."""
        with self._cv:
            self.question = (question, tuple(choices))
            self._cv.notify()

    def feed(self, pcm16: bytes | np.ndarray) -> None:
        """16-bit mono samples at ``sample_rate``; :class:`ClipTooLong` past ``max_seconds``."""
        if self._committed or self._closed:
            raise RuntimeError("the clip was committed or the session closed: start a new session for the next one")
        self.clip.add(pcm16)
        with self._cv:
            self._cv.notify()

    @property
    def seconds(self) -> float:
        return self.clip.seconds

    def commit(self) -> None:
        """The clip is complete: the tools finish as soon as the question is known."""
        with self._cv:
            self._committed = True
            self._cv.notify()

    def result(self) -> Future:
        """A future of the clip's :class:`StreamResult` (with no question asked by now, the transcript
        is the question); commits the clip if that was not done.  ValueError for a clip with no audio."""
        with self._cv:
            self._committed = True
            if self._done is None:
                self._done = Future()
                self._cv.notify()
            return self._done

    def close(self) -> None:
        """Stop the work (a tool call in progress finishes, its result is dropped) and free the audio."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._done is not None and not self._done.done():
            self._done.cancel()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the worker to stop (a closed session's stops after the tool call in progress)."""
        return self._stopped.wait(timeout)

    # -- the worker -------------------------------------------------------------------------------
    def _profile_runner(self):
        """YAMNet on the audio as it arrives when the plugin's router reads the clip: at the end its
        profile of the whole clip is ready (the selection then costs what the router costs)."""
        if not self.plugin.reads_audio:
            return None

        return PatchScores(YamNet.load(), self.plugin.pool.runner.lock("sound_events"))  # the encoder's YAMNet

    def _work(self) -> None:
        try:
            self._steps()
        finally:
            self._stopped.set()

    def _steps(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._closed or self._ready() or self._has_news())
                if self._closed:
                    break
                ready = self._ready()
            try:
                if ready:
                    self._finish()
                    break
                self._advance()
            except Exception as err:  # noqa: BLE001 - a failure reaches the caller through the future
                with self._cv:
                    if self._done is None:
                        self._done = Future()
                try:
                    self._done.set_exception(err)
                except InvalidStateError:  # cancelled meanwhile: nobody waits
                    pass
                break
        self.clip = None  # the audio and the tools' state go with the session
        self._profile, self.listeners = None, []

    def _ready(self) -> bool:
        """The clip is complete and the question known (or the result asked for without one)."""
        return self._committed and (self.question is not None or self._done is not None)

    def _tell_listeners(self, call) -> None:
        for listener in list(self.listeners):
            try:
                call(listener)
            except Exception:  # noqa: BLE001 - a listener is an optimisation: without it the clip is heard whole
                self.listeners.remove(listener)

    def _has_news(self) -> bool:
        received = self.clip.received
        if self._committed:  # the tail that came since the last step, at once
            return received > self._stepped
        return received - self._stepped >= self.step_samples or (
            self.question is not None and self.first_tools is None and received >= self.select_after
        )

    def _prefix_path(self) -> str:
        pcm = self.clip.pcm
        return str(store_audio(wav_bytes(pcm, self.sample_rate), "wav", self.plugin.audio_dir / "partial", 1 << 40))

    def _advance(self) -> None:
        started = time.perf_counter()
        self._stepped = self.clip.received
        self.clip.step()
        if self._profile is not None:
            self._profile.feed(self.clip.samples(16000))
        self._tell_listeners(lambda listener: listener.feed(self.clip.samples(listener.rate)))
        if self.question is not None and self.first_tools is None and self.clip.received >= self.select_after:
            question, choices = self.question
            audio = self._prefix_path() if self.plugin.reads_audio else ""
            try:
                self.first_tools = self.plugin.select(audio, question, choices)
            finally:  # a selection that fails leaves no prefix behind either
                if audio:
                    Path(audio).unlink(missing_ok=True)
            self.clip.select(self.first_tools)
            self.clip.step()
        self.tools_seconds += time.perf_counter() - started
        peekers = [listener for listener in self.listeners if hasattr(listener, "peek")]
        due = self.clip.received - self._peeked >= self.peek_samples and not self._committed
        if peekers and self.first_tools is not None and due:
            self._peeked = self.clip.received
            records = self.clip.peek()
            self._tell_listeners(lambda listener: listener.peek(records) if listener in peekers else None)

    def _stop_if_closed(self) -> None:
        if self._closed:
            raise SessionClosed("the session was closed")

    def _finish(self) -> None:
        if self.clip.received == 0:
            raise ValueError("the audio buffer is empty: append audio before committing it")
        started = time.perf_counter()
        tools_before = self.tools_seconds  # what was done before the commit, not the step after it
        self._advance()  # the audio that came since the last step
        waited = {"tools_after_commit": time.perf_counter() - started}
        self._stop_if_closed()
        raw = wav_bytes(self.clip.pcm, self.sample_rate)
        if self.store is not None:
            path = self.store.hold(raw, "wav", self.plugin.max_audio_bytes)
        else:
            path = store_audio(raw, "wav", self.plugin.audio_dir, self.plugin.max_audio_bytes)
        try:
            result = self._records(str(path), waited)
            result.seconds = {
                "tools_before_commit": round(tools_before, 4),
                **{k: round(v, 4) for k, v in waited.items()},
                "after_commit": round(time.perf_counter() - started, 4),
            }
        except BaseException:
            if self.store is not None:
                self.store.release(path)
            raise
        with self._cv:
            if self._done is None:
                self._done = Future()
        try:
            self._done.set_result(result)
        except InvalidStateError:  # closed and cancelled meanwhile: nobody takes the clip
            if self.store is not None:
                self.store.release(path)

    def _stop_if_closed(self) -> None:
        if self._closed:
            raise SessionClosed("the session was closed")

    def _records(self, path: str, waited: dict) -> StreamResult:
        """The whole clip's selection and records; the listeners hear it beside them."""
        self.clip.end()
        for listener in self.listeners:  # resampled, and flushed, before the listeners' thread reads them
            self.clip.samples(listener.rate)

        def hear() -> None:  # beside the selection and the tools' tails (two cores)
            before = time.perf_counter()
            self._tell_listeners(lambda listener: listener.finish(self.clip.samples(listener.rate), path))
            waited["listeners_after_commit"] = time.perf_counter() - before

        hearing = threading.Thread(target=hear, name="autagent-stream-listeners")
        hearing.start()
        stop = lambda: self._closed  # noqa: E731 - asked between one tool and the next
        try:
            question, choices = self.question or (None, ())
            if question is None:  # no question: the clip's own transcript is one
                self.clip.select(["asr"])
                question = self.clip.finish(path, stop)["asr"].get("output", {}).get("text", "")
            self._stop_if_closed()
            if self._profile is not None:
                samples = self.clip.samples(16000)
                self.plugin.prime_audio(path, self._profile.probabilities(samples), samples)
            before_select = time.perf_counter()
            tools = self.plugin.select(path, question, choices)
            waited["select_after_commit"] = time.perf_counter() - before_select
            self._stop_if_closed()
            self.clip.select(tools)
            before_tools = time.perf_counter()
            records = self.clip.finish(path, stop) if tools else {}
            self._stop_if_closed()
            self.plugin.remember(path, records.values())
            waited["tools_after_commit"] += time.perf_counter() - before_tools
        finally:
            hearing.join()
        ordered = [records[t] for t in self.plugin.pool.tool_ids if t in records]
        ordered += [r for t, r in records.items() if t not in self.plugin.pool.tool_ids]
        return StreamResult(
            audio=path,
            question=question,
            choices=choices,
            tools=tools,
            records=ordered,
            failed={r["tool"]: without_paths(r["error"], path) for r in ordered if "error" in r},
            first_tools=list(self.first_tools or []),
        )

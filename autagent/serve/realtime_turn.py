"""One turn of a ``/v1/realtime`` conversation (:mod:`.realtime`): a question and a clip arriving, fed to
the plugin's stream session (or kept as bare audio without a plugin), and the ``autagent`` block its
answer carries."""

from __future__ import annotations

import numpy as np

from tools.arriving import ClipTooLong, wav_bytes

from ..plugin.stream_session import StreamResult
from . import events as ev


class Turn:
    """One question and one clip: the plugin's stream session (or the bare audio without a plugin)."""

    def __init__(self, service, rate: int):
        self.plugin, self.rate, self.max_seconds = service.plugin, rate, service.max_audio_seconds
        hearing = getattr(service.upstream, "hearing", lambda: None)()  # a reasoner in process hears as it comes
        listeners = [hearing] if hearing is not None else []
        self.stream = None
        if self.plugin is not None:
            pool, store = service.stream_pool(), service.audio_store
            self.stream = self.plugin.stream(rate, self.max_seconds, listeners, store=store, executor=pool)
        self.pcm: list[bytes] = []  # without a plugin: the audio, for the upstream
        self.received = 0
        self.committed = False
        self.item_id = ev.new_id("item")

    def feed(self, pcm: bytes) -> None:
        if self.stream is not None:
            self.stream.feed(pcm)
        elif self.received + len(pcm) // 2 > int(self.max_seconds * self.rate):
            raise ClipTooLong(f"the audio buffer would pass its cap of {self.max_seconds:g} s")
        else:
            self.pcm.append(pcm)
        self.received += len(pcm) // 2

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        self.pcm = []

    def stopped(self) -> bool:
        return self.stream is None or self.stream.join(0)

    def join(self) -> None:
        """Wait for the closed stream's work to stop (after the tool call in progress)."""
        if self.stream is not None:
            self.stream.join()

    def bare_result(self, store, max_bytes: int) -> StreamResult:
        """Without a plugin: the committed audio as a WAV held in the service's bounded folder ``store``, a
        result with no tools (the caller releases the clip)."""
        if not self.pcm:
            raise ValueError("the audio buffer is empty: append audio before committing it")
        raw = wav_bytes(np.frombuffer(b"".join(self.pcm), dtype="<i2"), self.rate)
        return StreamResult(str(store.hold(raw, "wav", max_bytes)), "", (), [], [])


def answer_block(result: StreamResult, plugin_hash: str, upstream_s: float, total_s: float) -> dict:
    """``response.done``'s ``autagent`` block, as the HTTP answer's: the tools, those that failed, the plugin,
    seconds per stage, the first selection and how much of the tools' work was done before the commit."""
    seconds = {**result.seconds, "upstream": round(upstream_s, 4), "total_after_response_create": round(total_s, 4)}
    return {
        "tools": result.tools,
        "tools_failed": result.failed,
        "plugin": plugin_hash,
        "seconds": seconds,
        "first_tools": result.first_tools,
        "tools_before_commit_share": round(result.before_commit_share, 3),
    }

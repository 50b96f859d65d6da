"""A client of ``/v1/realtime`` (plain ``websockets``), the session it sets, and a clip's 16-bit PCM in
base64 chunks as the client appends them."""

from __future__ import annotations

import base64
import json

import numpy as np

RATE = 24000
TEXT = "What is the tempo?\n(A) 60 BPM\n(B) 120 BPM"


def pcm_chunks(pcm: np.ndarray, seconds: float = 0.1):
    step = int(seconds * RATE)
    return [base64.b64encode(pcm[i : i + step].tobytes()).decode() for i in range(0, len(pcm), step)]


SESSION = {"type": "realtime", "output_modalities": ["text"], "audio": {"input": {"format": {"type": "audio/pcm"}}}}


class Client:
    """A plain ``websockets`` client of ``/v1/realtime``."""

    def __init__(self, url: str):
        from websockets.sync.client import connect

        self.socket = connect(url.replace("http://", "ws://") + "/v1/realtime?model=m", max_size=None)
        self.created = self.recv()

    def send(self, kind: str, **fields) -> None:
        self.socket.send(json.dumps({"type": kind, **fields}))

    def recv(self, timeout: float = 120) -> dict:
        return json.loads(self.socket.recv(timeout=timeout))

    def until(self, kind: str, timeout: float = 120) -> list[dict]:
        """Every event up to and including the first of ``kind``."""
        seen = []
        while not seen or seen[-1]["type"] != kind:
            seen.append(self.recv(timeout))
        return seen

    def ask(self, text: str = TEXT) -> None:
        self.send(
            "conversation.item.create",
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        )
        assert [e["type"] for e in self.until("conversation.item.done")][-2:] == [
            "conversation.item.added",
            "conversation.item.done",
        ]

    def stream(self, pcm: np.ndarray) -> None:
        for chunk in pcm_chunks(pcm):
            self.send("input_audio_buffer.append", audio=chunk)

    def answer(self) -> dict:
        """Commit, ask for a response: its ``response.done``."""
        self.send("input_audio_buffer.commit")
        self.send("response.create")
        return self.until("response.done")[-1]

    def close(self) -> None:
        self.socket.close()

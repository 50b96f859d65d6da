"""A chat-completions request as the service hands it down, from its reading to the upstream call, as
vLLM hands its typed ``ChatCompletionRequest`` to ``serving_chat``: validated once (:class:`ChatCall`
holds the :class:`.protocol.ChatRequest`), its body parsed once (the same dict is what goes on: fields
the model does not type are forwarded as sent), its clip read once (:class:`ReadClip`: decoded from
base64, checked and stored by the service, then found again by the upstream call in the messages it
sends, so that the clip is re-encoded for the upstream from the stored file and never decoded from
base64 or checked a second time).

And the served answer read back as one of the request's choices (:func:`answer_choice`): a real
model answers free-form ("The answer is (B).", "It's a piano"); the service says which choice that is,
the way evaluation scores a reply (:mod:`rewards.scoring`), or that it is none or several.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rewards.scoring import resolve_reply, string_match

from ..reasoners.messages import BadRequest, ChatQuery, last_user_content, question_and_choices, split_records, text_of
from .protocol import ChatRequest


@dataclass(frozen=True)
class ReadClip:
    """The request's clip as the service read it: how its copies in the messages are recognised (the
    base64 text as sent and its format, or the remote URL it was fetched from) and the stored file
    (named by its content, held in the clips folder while the request runs)."""

    data: str | None
    """The base64 text as the request sent it (None for a clip fetched from ``url``)."""
    fmt: str
    """Its format, as declared and checked."""
    path: str
    """The stored clip: bytes under ``--max-audio-mb``, its format checked, its length under
    ``--max-audio-seconds`` (the bounds :class:`.upstream_audio.AudioPolicy` would check again)."""
    size: int
    """Its bytes."""
    url: str | None = None
    """The http(s) URL it was fetched from, when it was (``--allow-remote-audio``)."""

    def sent_as(self, data, fmt: str, url) -> bool:
        """Whether a clip part holding ``data`` in ``fmt`` (or naming ``url``) is this clip."""
        if url is not None:
            return url == self.url
        return self.data is not None and fmt == self.fmt and data == self.data


@dataclass
class ChatCall:
    """One chat-completions request on its way to the upstream."""

    body: dict
    """The request's JSON object as parsed (once, by the hardened reader)."""
    request: ChatRequest | None = None
    """The body validated (None for a body the service made itself: ``/v1/select``'s, the agentic loop's
    anchor message)."""
    query: ChatQuery | None = None
    """The clip, question, choices and records shown, once the service read them (with a plugin)."""
    clip: ReadClip | None = None
    """The clip as read, once the service read it."""
    messages: list | None = None
    """The messages to send on, when the plugin changed them (its records added); None: the body's."""

    @classmethod
    def checked(cls, body: dict, model_required: bool = False) -> ChatCall:
        """``body`` validated (:meth:`.protocol.Request.checked`: one line naming the field)."""
        return cls(body, ChatRequest.checked(body, model_required=model_required))

    @property
    def sent(self) -> dict:
        """The chat-completions body the upstream is sent (before its own changes: the model name, the
        choices in the text, the clips at its rate)."""
        return self.body if self.messages is None else {**self.body, "messages": self.messages}

    @property
    def choices(self) -> tuple[str, ...]:
        """The request's choices (its ``choices`` list, else those its last user text lists); () when it
        gives none or they cannot be read."""
        if self.query is not None:
            return self.query.choices
        explicit = self.request.choices if self.request is not None else self.body.get("choices")
        try:
            _, text = split_records(text_of(last_user_content(self.body.get("messages"))))
            return question_and_choices(text, explicit)[1]
        except BadRequest:
            return tuple(explicit) if isinstance(explicit, list) else ()


NAMED_LABEL = re.compile(r"\(([A-Z])\)|\b(?i:answer)(?: is)?\s*[:\-]?\s*([A-Z])(?=$|[\s.,;:!])")
"""A label named inside an answer: ``(B)`` anywhere, or ``answer: B`` / ``answer is B``."""


def answer_choice(reply: dict, choices) -> dict | None:
    """The choice the reply's (first) answer names, as ``{"index", "label", "text"}``; None when it names
    none or several.  Read as evaluation reads a reply (:mod:`rewards.scoring`): a label (``B``,
    ``(B)``, ``B.``, ``(B) text``) is that choice; otherwise the one choice all of whose words the
    answer has, without a word only another choice has ("It's a piano." is ``piano``, "piano or
    guitar" is neither); failing that, the one label it names inside its text ("The answer is (B).").
    An answer naming two labels ("(A) or (B)") names none."""
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(content, str) or not content.strip() or not choices:
        return None
    labels = {ord(a or b) - ord("A") for a, b in NAMED_LABEL.findall(content)}
    if len(labels) > 1:  # "(A) or (B)"
        return None
    resolved = resolve_reply(content, choices)
    named = [i for i, choice in enumerate(choices) if string_match(choice, resolved, choices)]
    if len(named) != 1:
        named = [i for i in labels if i < len(choices) and (not named or i in named)]
    if len(named) != 1:
        return None
    return {"index": named[0], "label": chr(ord("A") + named[0]), "text": choices[named[0]]}

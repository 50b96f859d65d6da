"""The cascade over HTTP: choice scores from a served text model's prompt log-probabilities.

The cascade (:mod:`.cascade`) picks the choice with the highest calibrated log-likelihood after a
prompt of record lines and the question.  A server that echoes every prompt token's log-probability
(vLLM's ``/v1/completions`` with ``echo: true, logprobs: 1, max_tokens: 1``) gives those numbers for a
served model: each prompt is laid out by the cascade's own :func:`.cascade.layout.lay_out`, with the
server's tokenizer (vLLM's ``/tokenize``, each distinct piece asked once and kept), and every
``prompt + choice`` is sent as token ids, so the tokens scored are the in-process cascade's, piece for
piece (no tokenisation of the text at the prompt's boundary).  The prompts of a batch go as lists,
``prompts_per_request`` to a request, and the requests run ``max_concurrency`` at a time.

A server that cannot (no ``/tokenize``, no echoed log-probabilities: OpenAI's API) is told apart by
:meth:`ServedScorer.probe`, the first request; the reasoner then answers with generated text and says so.

Each item's reply is given (``on_reply``) as soon as the requests holding its prompts are answered, so
that a caller caches it then (the calibration's prompt goes first: every item waits for it), and a
reply the server spoiled for one prompt (a null or non-finite log-probability where a choice's token is
scored) is an error for that item only.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter

from tools.memo import BoundedMemo

from .base import Reply
from .cascade.layout import Calibration, lay_out, neutral
from .openai_http import failure_name

log = logging.getLogger(__name__)


def summed(values, k: int) -> float | str:
    """The sum of a choice's ``k`` tokens' echoed log-probabilities, or the failure when the server
    spoiled them (a null, a string, NaN or infinity: a malformed reply for this item alone)."""
    if len(values) != k or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values
    ):
        return "malformed response: the server echoed no usable log-probability for a choice's token"
    return float(sum(values))


class NoPromptLogprobs(RuntimeError):
    """The server cannot score choices: it has no ``/tokenize`` or does not echo prompt log-probabilities."""


class ServedTokenizer:
    """Text to the served model's token ids through its ``/tokenize`` (one request per distinct text,
    the most recent ``size`` kept)."""

    def __init__(self, root_url: str, model: str, size: int = 65536):
        self.url, self.model = root_url.rstrip("/") + "/tokenize", model
        self.known = BoundedMemo(size)
        self.bos: list[int] | None = None

    async def tokenize(self, api, text: str, special: bool = False) -> list[int]:
        import openai

        body = {"model": self.model, "prompt": text, "add_special_tokens": special}
        try:
            reply = await api.post(self.url, cast_to=object, body=body)
        except openai.NotFoundError:
            raise NoPromptLogprobs("the server has no /tokenize") from None
        tokens = reply.get("tokens") if isinstance(reply, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise NoPromptLogprobs("the server's /tokenize answers no token ids")
        return tokens

    async def start(self, api) -> list[int]:
        """The tokens the server puts before a prompt (the BOS): ``"a"`` with and without them."""
        if self.bos is None:
            plain, special = await self.tokenize(api, "a"), await self.tokenize(api, "a", special=True)
            self.bos = special[: len(special) - len(plain)] if special[len(special) - len(plain) :] == plain else []
        return self.bos

    async def laid_out(self, api, build, semaphore):
        """``build(encode)`` with every text it encodes known: built again after asking the texts it
        missed (a budget cut asks the cut mark only once a line is known to overflow)."""
        import asyncio

        missing: set[str] = set()

        def encode(text: str) -> list[int]:
            ids = self.known.get(text)
            if ids is None:
                missing.add(text)
                return []
            return ids

        for _ in range(4):
            missing.clear()
            built = build(encode)
            if not missing:
                return built

            async def ask(text):
                async with semaphore:
                    self.known[text] = await self.tokenize(api, text)

            await asyncio.gather(*(ask(text) for text in list(missing)))
        raise RuntimeError("the layout kept asking for new texts")


class ServedScorer:
    """Choices scored as the in-process cascade scores them (``layout``: its
    :class:`~.cascade.CascadeReasonerConfig`: records per line, prompt budget, calibration), over HTTP."""

    def __init__(self, root_url: str, model: str, layout, prompts_per_request: int):
        self.model, self.layout, self.per_request = model, layout, prompts_per_request
        self.tokenizer = ServedTokenizer(root_url, model)
        self.calibration = Calibration(layout.neutral_cache_size)

    async def probe(self, api) -> None:
        """Raise :class:`NoPromptLogprobs` unless the server tokenizes and echoes a prompt's log-probabilities."""
        import openai

        bos, prompt = await self.tokenizer.start(api), self.layout.neutral_prompt
        self.tokenizer.known[prompt] = await self.tokenizer.tokenize(api, prompt)
        ids = bos + self.tokenizer.known[prompt]
        try:
            await self.echo(api, [ids])
        except (openai.BadRequestError, openai.NotFoundError, openai.UnprocessableEntityError) as err:
            raise NoPromptLogprobs(f"the server refuses echoed log-probabilities (HTTP {err.status_code})") from None
        except ValueError as err:
            raise NoPromptLogprobs(str(err)) from None

    async def echo(self, api, prompts: list[list[int]]) -> list[list[float | None]]:
        """Each prompt's tokens' log-probabilities as the server echoes them (``ValueError`` if it does not)."""
        raw = await api.completions.with_raw_response.create(
            model=self.model, prompt=prompts, echo=True, logprobs=1, max_tokens=1, temperature=0.0
        )
        try:
            choices = sorted(json.loads(raw.http_response.text)["choices"], key=lambda c: c["index"])
            rows = [c["logprobs"]["token_logprobs"] for c in choices]
        except (KeyError, TypeError, json.JSONDecodeError):
            raise ValueError("the server echoes no prompt log-probabilities") from None
        if len(rows) != len(prompts) or any(not isinstance(r, list) or len(r) < len(p) for r, p in zip(rows, prompts)):
            raise ValueError("the server echoes no prompt log-probabilities")
        return rows

    async def _score(self, api, semaphore, prompts, done=None) -> list[list[float | str]]:
        """Each prompt's choices' summed log-likelihoods (or, where its request failed or its reply was
        spoiled, the failure); ``done(p, row)`` is called for prompt ``p`` once its last request is in."""
        import asyncio

        import openai

        flat = [
            (p, c, [t for _, piece in prompt.pieces for t in piece] + ids, len(ids))
            for p, prompt in enumerate(prompts)
            for c, ids in enumerate(prompt.choices)
        ]
        out: list[list[float | str]] = [[0.0] * len(prompt.choices) for prompt in prompts]
        left = Counter(p for p, *_ in flat)

        async def request(chunk):
            async with semaphore:
                try:
                    rows = await self.echo(api, [ids for _, _, ids, _ in chunk])
                except openai.APIError as err:
                    rows = [failure_name(err)] * len(chunk)
                except ValueError as err:
                    rows = [f"malformed response: {err}"] * len(chunk)
            for (p, c, ids, k), row in zip(chunk, rows):
                out[p][c] = row if isinstance(row, str) else summed(row[len(ids) - k : len(ids)], k)
                left[p] -= 1
                if not left[p] and done is not None:
                    done(p, out[p])

        step = self.per_request
        await asyncio.gather(*(request(flat[i : i + step]) for i in range(0, len(flat), step)))
        return out

    async def answer_many(self, api, semaphore, requests, on_reply=None) -> list[Reply]:
        """Replies to ``(sample, records)`` requests: the best choice and every choice's score, or, for a
        question without choices, the model's greedy continuation up to the first line break; each also
        given to ``on_reply(index, reply)`` as soon as it is known."""
        import asyncio

        c = self.layout
        bos, limit = await self.tokenizer.start(api), c.max_prompt_tokens
        laid = await self.tokenizer.laid_out(
            api,
            lambda encode: [
                lay_out(encode, bos, s.question, list(s.choices), r, max_items=c.max_items, max_prompt_tokens=limit)
                for s, r in requests
            ],
            semaphore,
        )
        scored = [i for i, (s, _) in enumerate(requests) if s.choices]
        asked = [requests[i] for i in scored]
        unknown = self.calibration.unknown(asked) if c.calibrate else []
        prompts = [laid[i].prompt for i in scored]
        if unknown:  # first: every item waits for it
            prompts.insert(
                0,
                await self.tokenizer.laid_out(
                    api, lambda encode: neutral(encode, bos, c.neutral_prompt, unknown), semaphore
                ),
            )
        replies: list[Reply | None] = [None] * len(requests)
        first = 1 if unknown else 0
        waiting: dict[int, list] = {}
        calibration: dict = {"ready": not unknown, "failed": None}

        def give(i: int, reply: Reply) -> None:
            replies[i] = reply
            if on_reply is not None:
                on_reply(i, reply)

        def finish(i: int, row: list) -> None:
            failed = calibration["failed"] or next((v for v in row if isinstance(v, str)), None)
            if failed is not None:
                return give(i, Reply(None, failed))
            if c.calibrate:
                (row,) = self.calibration.apply([row], [requests[i]])
            choices = requests[i][0].choices
            give(i, Reply(choices[max(range(len(row)), key=row.__getitem__)], note=laid[i].note, scores=tuple(row)))

        def done(p: int, row: list) -> None:
            if p >= first and not calibration["ready"]:
                waiting[scored[p - first]] = row
                return
            if p >= first:
                return finish(scored[p - first], row)
            calibration["failed"] = next((v for v in row if isinstance(v, str)), None)
            if calibration["failed"] is None:
                self.calibration.learn(unknown, row)
            calibration["ready"] = True
            for i, held in waiting.items():
                finish(i, held)
            waiting.clear()

        await self._score(api, semaphore, prompts, done)
        free = [i for i, (s, _) in enumerate(requests) if not s.choices]

        async def free_form(i):
            give(i, await self._continue(api, semaphore, laid[i]))

        await asyncio.gather(*(free_form(i) for i in free))
        return replies

    async def _continue(self, api, semaphore, laid) -> Reply:
        import openai

        ids = [t for _, piece in laid.prompt.pieces for t in piece]
        async with semaphore:
            try:
                raw = await api.completions.with_raw_response.create(
                    model=self.model, prompt=[ids], max_tokens=self.layout.max_new_tokens, temperature=0.0
                )
                text = json.loads(raw.http_response.text)["choices"][0]["text"]
            except openai.APIError as err:
                return Reply(None, failure_name(err))
            except (KeyError, IndexError, TypeError, ValueError):
                return Reply(None, "malformed response: not a completion")
        return Reply(str(text).split("\n")[0].strip() or None, note=laid.note)

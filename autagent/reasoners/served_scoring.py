"""The cascade over HTTP: choice scores from a served text model's prompt log-probabilities.

The cascade (:mod:`.cascade`) picks the choice with the highest calibrated log-likelihood after a
prompt of record lines and the question.  A server that echoes every prompt token's log-probability
(vLLM's ``/v1/completions`` with ``echo: true, logprobs: 1, max_tokens: 1``) gives those numbers for a
served model: each prompt is laid out by the cascade's own :func:`.cascade.layout.lay_out`, with the
server's tokenizer (vLLM's ``/tokenize``, each distinct piece asked once and kept), and every
``prompt + choice`` is sent as token ids, so the tokens scored are the in-process cascade's, piece for
piece (no tokenisation of the text at the prompt's boundary).  The prompts of a batch go as lists, as
many to a request and as many requests at once as the :class:`~.pacing.Pacer` says (at most
``prompts_per_request`` and ``max_concurrency``; fewer where the server is measured slow).

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
from .pacing import Pacer, Unanswered

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

    async def start(self, api, pacer: Pacer) -> list[int]:
        """The tokens the server puts before a prompt (the BOS): ``"a"`` with and without them."""
        if self.bos is None:
            plain = await pacer.one(0, lambda: self.tokenize(api, "a"))
            special = await pacer.one(0, lambda: self.tokenize(api, "a", special=True))
            self.bos = special[: len(special) - len(plain)] if special[len(special) - len(plain) :] == plain else []
        return self.bos

    async def ask(self, api, texts: list[str], pacer: Pacer) -> None:
        """Each of ``texts`` tokenized and kept, a request each; :class:`~.pacing.Unanswered` if one is not."""
        failed: list[str] = []

        async def one(units, timeout):
            self.known[texts[units[0]]] = await self.tokenize(api, texts[units[0]])

        await pacer.run([0] * len(texts), one, lambda units, problem: failed.append(problem), grouped=False)
        if failed:
            raise Unanswered(failed[0])

    async def laid_out(self, api, build, pacer: Pacer):
        """``build(encode)`` with every text it encodes known: built again after asking the texts it
        missed (a budget cut asks the cut mark only once a line is known to overflow);
        :class:`~.pacing.Unanswered` when the server did not tokenize one."""
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

            await self.ask(api, list(missing), pacer)
        raise RuntimeError("the layout kept asking for new texts")


class ServedScorer:
    """Choices scored as the in-process cascade scores them (``layout``: its
    :class:`~.cascade.CascadeReasonerConfig`: records per line, prompt budget, calibration), over HTTP."""

    def __init__(self, root_url: str, model: str, layout):
        self.model, self.layout = model, layout
        self.tokenizer = ServedTokenizer(root_url, model)
        self.calibration = Calibration(layout.neutral_cache_size)

    async def probe(self, api, pacer: Pacer) -> None:
        """Raise :class:`NoPromptLogprobs` unless the server tokenizes and echoes a prompt's log-probabilities
        (:class:`~.pacing.Unanswered` when it does not answer); the first speed the pacer measures."""
        import openai

        bos, prompt = await self.tokenizer.start(api, pacer), self.layout.neutral_prompt
        self.tokenizer.known[prompt] = await pacer.one(0, lambda: self.tokenizer.tokenize(api, prompt))
        ids = bos + self.tokenizer.known[prompt]

        async def echoed():
            try:
                await self.echo(api, [ids])
            except (openai.BadRequestError, openai.NotFoundError, openai.UnprocessableEntityError) as err:
                raise NoPromptLogprobs(
                    f"the server refuses echoed log-probabilities (HTTP {err.status_code})"
                ) from None
            except ValueError as err:
                raise NoPromptLogprobs(str(err)) from None

        await pacer.one(len(ids), echoed)

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

    async def _score(self, api, pacer: Pacer, prompts, done=None) -> list[list[float | str]]:
        """Each prompt's choices' summed log-likelihoods (or, where its request failed or its reply was
        spoiled, the failure); ``done(p, row)`` is called for prompt ``p`` once its last request is in."""
        flat = [
            (p, c, [t for _, piece in prompt.pieces for t in piece] + ids, len(ids))
            for p, prompt in enumerate(prompts)
            for c, ids in enumerate(prompt.choices)
        ]
        out: list[list[float | str]] = [[0.0] * len(prompt.choices) for prompt in prompts]
        left = Counter(p for p, *_ in flat)

        def record(units, rows) -> None:
            for (p, c, ids, k), row in zip((flat[u] for u in units), rows):
                out[p][c] = row if isinstance(row, str) else summed(row[len(ids) - k : len(ids)], k)
                left[p] -= 1
                if not left[p] and done is not None:
                    done(p, out[p])

        async def send(units, timeout):
            try:
                rows = await self.echo(api, [flat[u][2] for u in units])
            except ValueError as err:
                rows = [f"malformed response: {err}"] * len(units)
            record(units, rows)

        await pacer.run(
            [len(ids) for _, _, ids, _ in flat], send, lambda units, problem: record(units, [problem] * len(units))
        )
        return out

    async def answer_many(self, api, pacer: Pacer, requests, on_reply=None) -> list[Reply]:
        """Replies to ``(sample, records)`` requests: the best choice and every choice's score, or, for a
        question without choices, the model's greedy continuation up to the first line break; each also
        given to ``on_reply(index, reply)`` as soon as it is known (every one an error when the server
        did not tokenize what the layout needs)."""
        try:
            return await self._answer_many(api, pacer, requests, on_reply)
        except Unanswered as err:
            replies = [Reply(None, str(err))] * len(requests)
            for i, reply in enumerate(replies):
                if on_reply is not None:
                    on_reply(i, reply)
            return replies

    async def _answer_many(self, api, pacer: Pacer, requests, on_reply=None) -> list[Reply]:
        c = self.layout
        bos, limit = await self.tokenizer.start(api, pacer), c.max_prompt_tokens
        laid = await self.tokenizer.laid_out(
            api,
            lambda encode: [
                lay_out(encode, bos, s.question, list(s.choices), r, max_items=c.max_items, max_prompt_tokens=limit)
                for s, r in requests
            ],
            pacer,
        )
        scored = [i for i, (s, _) in enumerate(requests) if s.choices]
        asked = [requests[i] for i in scored]
        unknown = self.calibration.unknown(asked) if c.calibrate else []
        prompts = [laid[i].prompt for i in scored]
        if unknown:  # first: every item waits for it
            prompts.insert(
                0,
                await self.tokenizer.laid_out(
                    api, lambda encode: neutral(encode, bos, c.neutral_prompt, unknown), pacer
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

        await self._score(api, pacer, prompts, done)
        free = [i for i, (s, _) in enumerate(requests) if not s.choices]
        if free:
            await self._continue(api, pacer, [laid[i] for i in free], lambda k, reply: give(free[k], reply))
        return replies

    async def _continue(self, api, pacer: Pacer, laid: list, give) -> None:
        """The greedy continuation of each prompt without choices, up to its first line break: ``give(k, reply)``."""
        prompts = [[t for _, piece in one.prompt.pieces for t in piece] for one in laid]

        async def send(units, timeout):
            (k,) = units
            raw = await api.completions.with_raw_response.create(
                model=self.model, prompt=[prompts[k]], max_tokens=self.layout.max_new_tokens, temperature=0.0
            )
            try:
                text = json.loads(raw.http_response.text)["choices"][0]["text"]
            except (KeyError, IndexError, TypeError, ValueError):
                return give(k, Reply(None, "malformed response: not a completion"))
            give(k, Reply(str(text).split("\n")[0].strip() or None, note=laid[k].note))

        costs = [len(ids) + self.layout.max_new_tokens for ids in prompts]

        def fail(units, problem):
            for unit in units:
                give(unit, Reply(None, problem))

        await pacer.run(costs, send, fail, grouped=False)

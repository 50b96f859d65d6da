"""The one sample type every loader, reasoner, policy and scorer shares."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Sample:
    id: str
    audio: str  # absolute path
    question: str
    choices: tuple[str, ...]
    answer: str  # the gold choice text
    domain: str = ""  # sound | music | speech | mixed
    category: str = ""  # task / question type
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def to_mmau(self, audio_root: str | None = None) -> dict:
        """This sample as one MMAU test-mini JSON object (``audio_id`` relative to ``audio_root``)."""
        import os

        audio = os.path.relpath(self.audio, audio_root) if audio_root else self.audio
        row = {
            "id": self.id,
            "audio_id": audio,
            "question": self.question,
            "choices": list(self.choices),
            "answer": self.answer,
            "task": self.domain,
            "category": self.category,
        }
        row.update({k: v for k, v in self.meta.items() if k not in row})
        return row

    def as_dict(self) -> dict:
        return asdict(self)

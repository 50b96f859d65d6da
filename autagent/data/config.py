"""Where a run's samples come from (``data:``): dataset files, or the embedded benchmark's splits."""

from __future__ import annotations

from dataclasses import dataclass, field

from .generator import EmbeddedBenchmarkConfig


@dataclass
class DataConfig:
    """Where samples come from: dataset files (MMAU/MMAR/AVQA), or the embedded benchmark's splits.

    A config that names any file never generates the embedded benchmark."""

    train: str | None = None
    """Training file (required for training whenever any file is named)."""
    dev: str | None = None
    """Dev file; when absent, ``dev_fraction`` of train is held out (or dev evaluation is skipped)."""
    test: str | None = None
    """Test file; when absent, the run trains and exports but evaluates nothing."""
    format: str = "auto"
    """mmau | mmar | avqa | auto (from the first row's fields)."""
    limit_train: int | None = None
    """Use only the first N rows (for quick runs)."""
    limit_dev: int | None = None
    """Use only the first N rows."""
    limit_test: int | None = None
    """Use only the first N rows."""
    dev_fraction: float = 0.0
    """With no dev file: the share of train held out as dev (0: no dev evaluation)."""
    dev_seed: int = 0
    """Seed of that hold-out (printed in the log)."""
    audio_wording: bool = False
    """AVQA: ask about "the audio" where the question says "the video" (r1-aqa's wording)."""
    benchmark: EmbeddedBenchmarkConfig = field(default_factory=EmbeddedBenchmarkConfig)
    """The embedded benchmark, used only when no file is named."""

    def __post_init__(self):
        if self.format not in ("auto", "mmau", "mmar", "avqa"):
            raise ValueError(f"data.format must be auto, mmau, mmar or avqa, got {self.format!r}")
        if not 0.0 <= self.dev_fraction < 1.0:
            raise ValueError(f"data.dev_fraction must be in [0, 1), got {self.dev_fraction}")
        for name in ("limit_train", "limit_dev", "limit_test"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"data.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def uses_files(self) -> bool:
        return any(p is not None for p in (self.train, self.dev, self.test))

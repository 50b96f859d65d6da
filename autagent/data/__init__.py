"""Samples, benchmark loaders and the embedded benchmark; :mod:`.progress`, the progress bars its
generator, the router's training and the evaluation show (here, in the lowest layer that uses them)."""

from .loaders import DatasetError, load_dataset, write_mmau
from .sample import Sample

__all__ = ["DatasetError", "Sample", "load_dataset", "write_mmau"]

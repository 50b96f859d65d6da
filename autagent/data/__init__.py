"""Samples, benchmark loaders and the embedded benchmark."""

from .loaders import DatasetError, load_dataset, write_mmau
from .sample import Sample

__all__ = ["DatasetError", "Sample", "load_dataset", "write_mmau"]

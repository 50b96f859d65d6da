"""Samples, benchmark loaders and the embedded benchmark; :mod:`.labelled`, questions labelled with the
tools that reveal their answers (the transfer check's and the back-off's calibration); :mod:`.progress`,
the progress bars its generator, the router's training and the evaluation show (here, in the lowest
layer that uses them)."""

from .loaders import DatasetError, load_dataset, write_mmau
from .sample import Sample

__all__ = ["DatasetError", "Sample", "load_dataset", "write_mmau"]

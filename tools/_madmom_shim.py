"""Make madmom 0.16.1 (2018) importable on Python 3.11 and NumPy >= 1.24.

madmom imports ``collections.MutableSequence`` and uses ``np.float``/``np.int``,
both removed since.  We alias the old names before the first ``import madmom``.
"""

from __future__ import annotations

import collections
import collections.abc

import numpy as np

for _name in ("MutableSequence", "Sequence", "Mapping", "MutableMapping", "Iterable", "Callable"):
    if not hasattr(collections, _name):
        setattr(collections, _name, getattr(collections.abc, _name))

for _name, _alias in (("float", float), ("int", int), ("complex", complex), ("bool", bool), ("object", object)):
    if _name not in np.__dict__:
        setattr(np, _name, _alias)


def import_madmom():
    """Import and return madmom with the compatibility aliases in place."""
    import madmom  # noqa: PLC0415

    return madmom

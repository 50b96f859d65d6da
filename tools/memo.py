"""A bounded memo: what every in-process cache of a long-running service holds.

The encoders, the embedded reasoner and the answer cache memoise per text, clip or record so that
training (which asks about the same few thousand items again and again) stays cheap; a service that
runs for weeks sees a new clip and a new question with every request, so each of those memos keeps at
most ``max_items`` entries (and, where entries differ in size, at most ``max_bytes``), dropping the
least recently used.  Thread-safe: a service reads and fills them from several worker threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class BoundedMemo:
    """A dict-like LRU memo: ``memo[key]``, ``key in memo``, ``memo[key] = value``, ``len(memo)``.

    ``size(value)`` (default: 1 per entry) counts towards ``max_bytes`` when that is set."""

    def __init__(self, max_items: int, max_bytes: int | None = None, size: Callable[[Any], int] | None = None):
        if max_items < 1 or (max_bytes is not None and max_bytes < 1):
            raise ValueError("a memo's max_items and max_bytes must be >= 1")
        self.max_items, self.max_bytes = max_items, max_bytes
        self._size = size or (lambda value: 0)
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.evicted = 0

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries

    def __getitem__(self, key: Hashable) -> Any:
        with self._lock:
            value, _ = self._entries[key]
            self._entries.move_to_end(key)
            return value

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key not in self._entries:
                return default
            self._entries.move_to_end(key)
            return self._entries[key][0]

    def __setitem__(self, key: Hashable, value: Any) -> None:
        size = int(self._size(value)) if self.max_bytes is not None else 0
        with self._lock:
            if key in self._entries:
                self.bytes -= self._entries.pop(key)[1]
            self._entries[key] = (value, size)
            self.bytes += size
            while len(self._entries) > self.max_items or (
                self.max_bytes is not None and self.bytes > self.max_bytes and len(self._entries) > 1
            ):
                _, (_, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped
                self.evicted += 1

    def update(self, pairs) -> None:
        for key, value in pairs:
            self[key] = value

    def items(self) -> list[tuple[Hashable, Any]]:
        """The entries, least recently used first (a snapshot)."""
        with self._lock:
            return [(key, value) for key, (value, _) in self._entries.items()]

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0


def nbytes(value: Any) -> int:
    """The bytes of the arrays in ``value`` (an array, or a tuple/list holding some), plus 64 per item."""
    if hasattr(value, "nbytes"):
        return int(value.nbytes)
    if isinstance(value, tuple | list):
        return 64 * len(value) + sum(nbytes(v) for v in value if hasattr(v, "nbytes") or isinstance(v, tuple | list))
    return 64

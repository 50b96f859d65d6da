"""JSON from a client (or an upstream) parsed with a bound on its nesting.

``json.loads`` raises :class:`RecursionError`, not :class:`ValueError`, on 100,000 nested brackets,
and a body nested a few hundred deep parses but breaks whatever walks it recursively later (a deep
copy, ``json.dumps`` to the upstream, a schema check).  :func:`loads` turns both into a
:class:`TooDeep` (a ``ValueError``, so every ``except ValueError`` that answers "not JSON" answers
it too, with its own message)."""

from __future__ import annotations

import json

MAX_DEPTH = 64
"""Arrays and objects nested at most this deep: a chat request with tools and their JSON schemas
nests about 12."""


class TooDeep(ValueError):
    """JSON nested deeper than :data:`MAX_DEPTH`."""

    def __init__(self, max_depth: int = MAX_DEPTH):
        super().__init__(f"nested deeper than {max_depth} levels")


def too_deep(value, max_depth: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists and dicts deeper than ``max_depth`` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def loads(text, max_depth: int = MAX_DEPTH):
    """``json.loads(text)``; :class:`TooDeep` when it nests deeper than ``max_depth`` (or too deep for
    the parser's own recursion), ``json.JSONDecodeError`` when it is not JSON."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(max_depth) from None
    if too_deep(value, max_depth):
        raise TooDeep(max_depth)
    return value

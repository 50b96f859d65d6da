"""The accuracy-for-cost dial: a plugin's selection cut to at most ``max_tools`` tools and/or to the tools
whose measured seconds fit a latency budget, at serve time, without retraining.

Why: a plugin's price per tool is fixed when it is trained, but the user's is not (a phone on a slow
link, a batch job with time to spare).  A router scores every tool (its probability of calling it), so
any cut of the same ranking is a cheaper plugin: the most probable tools first.  The trained threshold
(a tool is called when its probability exceeds one half) stays the default and the ceiling: the dial
only removes tools, never adds one the plugin would not call (``ranked`` lists hold the called tools in
the plugin's order of preference).

Latency is the **sum** of the chosen tools' seconds per clip as measured on the exporting machine
(``tool_seconds`` in the manifest): what one process running them one after another pays; a pool that
runs them side by side pays less, so the budget is an upper bound there.  A tool that does not fit is
skipped and the next one tried (a cheap useful tool still fits after an expensive one is refused).
"""

from __future__ import annotations

from dataclasses import dataclass

from .trust import PluginError

Subset = tuple[str, ...]


class DialError(PluginError):
    """A dial that cannot be honoured (a bad value, or a latency budget without measured seconds)."""


@dataclass(frozen=True)
class Dial:
    max_tools: int | None = None
    """Call at most this many tools per query (the most probable of those the plugin calls); None: no cap."""
    latency_budget_ms: float | None = None
    """Call tools, most probable first, only while their measured seconds (summed) fit in this many
    milliseconds; None: no budget."""

    def __post_init__(self):
        if self.max_tools is not None and (isinstance(self.max_tools, bool) or not isinstance(self.max_tools, int)):
            raise DialError(f"max_tools must be a whole number >= 0, got {self.max_tools!r}")
        if self.max_tools is not None and self.max_tools < 0:
            raise DialError(f"max_tools must be >= 0, got {self.max_tools}")
        if self.latency_budget_ms is not None and not self.latency_budget_ms >= 0:
            raise DialError(f"latency_budget_ms must be >= 0, got {self.latency_budget_ms!r}")

    @property
    def active(self) -> bool:
        return self.max_tools is not None or self.latency_budget_ms is not None


def set_dial(plugin, dial: Dial | None):
    """Put ``dial`` on a loaded policy plugin (a router's); refused for a plugin without per-tool scores
    (an LM agent writes a list).  Returns the plugin."""
    if dial is None or not dial.active:
        return plugin
    if not hasattr(plugin, "dial"):
        raise DialError("--max-tools and --latency-budget-ms need per-tool scores: a router plugin, not an LM agent's")
    plugin.dial = dial
    return plugin


def recorded_seconds(manifest: dict) -> dict[str, float]:
    """Each tool's measured seconds per clip, as the plugin records them (empty for older plugins)."""
    return {str(k): float(v) for k, v in (manifest.get("tool_seconds") or {}).items()}


def apply_dial(ranked: list[Subset], dial: Dial | None, seconds: dict[str, float] | None, order) -> list[Subset]:
    """Each query's tools after the dial: ``ranked`` holds the tools the plugin calls per query, most
    probable first; the result keeps the plugin's tool ``order`` (records are shown in that order, so
    the answers a reasoner caches are shared with undialled selections)."""
    if dial is None or not dial.active:
        kept = ranked
    else:
        budget = None if dial.latency_budget_ms is None else dial.latency_budget_ms / 1000.0
        if budget is not None:
            missing = sorted({t for row in ranked for t in row if t not in (seconds or {})})
            if missing:
                raise DialError(
                    f"a latency budget needs each tool's measured seconds; this plugin records none for {missing} "
                    "(plugins exported before the dial: use --max-tools, or re-export)"
                )
        kept = [_cut(row, dial.max_tools, budget, seconds or {}) for row in ranked]
    position = {t: i for i, t in enumerate(order)}
    return [tuple(sorted(row, key=lambda t: position.get(t, len(position)))) for row in kept]


def _cut(row: Subset, max_tools: int | None, budget: float | None, seconds: dict[str, float]) -> Subset:
    out: list[str] = []
    spent = 0.0
    for tool in row:
        if max_tools is not None and len(out) >= max_tools:
            break
        if budget is not None and spent + seconds[tool] > budget + 1e-12:
            continue
        out.append(tool)
        spent += seconds.get(tool, 0.0)
    return tuple(out)


def top_k(scores, order, k: int) -> list[Subset]:
    """Each query's ``k`` highest-scoring tools whatever the threshold (``scores``: ``[B, T]`` in ``order``;
    ties go to the earlier tool): the points of the accuracy-against-tools curve."""
    out = []
    for row in scores:
        ranking = sorted(range(len(order)), key=lambda j: (-float(row[j]), j))
        out.append(tuple(order[j] for j in sorted(ranking[:k])))
    return out

"""The accuracy-for-cost dial: a router plugin's selection set at serve time, without retraining, as exactly
the ``tools`` most probable tools, at most ``max_tools`` of those its threshold calls, and/or the tools
whose measured seconds fit a latency budget.

Why: a plugin's price per tool is fixed when it is trained, but the user's is not (a phone on a slow
link, a batch job with time to spare).  A router scores every tool (its probability of calling it), so
any cut of the same ranking is another operating point: the most probable tools first.

* ``tools=K`` calls exactly the K most probable tools whatever the threshold: the points of the
  evaluation's accuracy-against-tools curve (:mod:`autagent.evaluation.cost_curve` calls this very
  function through the plugin), so what the curve measured at K is what ``--tools K`` ships;
* ``max_tools=K`` only removes tools: at most K of those the trained threshold calls (a query on which the
  threshold calls one tool keeps one);
* ``latency_budget_ms`` walks the same ranking (the threshold's tools, or the K most probable with
  ``tools``) and keeps each tool whose seconds still fit.

Latency is the **sum** of the chosen tools' seconds per clip as measured on the exporting machine
(``tool_seconds`` in the manifest): what one process running them one after another pays; a pool that
runs them side by side pays the slowest one, so the budget is an upper bound there.  A tool that does not
fit is skipped and the next one tried (a cheap useful tool still fits after an expensive one is refused).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .trust import PluginError

Subset = tuple[str, ...]


class DialError(PluginError):
    """A dial that cannot be honoured (a bad value, or a latency budget without measured seconds)."""


@dataclass(frozen=True)
class Dial:
    max_tools: int | None = None
    """Call at most this many of the tools the trained threshold calls (the most probable first); None: no cap."""
    latency_budget_ms: float | None = None
    """Call tools, most probable first, only while their measured seconds (summed) fit in this many
    milliseconds; None: no budget."""
    tools: int | None = None
    """Call exactly this many tools per query, the most probable, whatever the threshold (the curve's
    points); None: the threshold's tools."""

    def __post_init__(self):
        for name in ("max_tools", "tools"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise DialError(f"{name} must be a whole number >= 0, got {value!r}")
            if value is not None and value < 0:
                raise DialError(f"{name} must be >= 0, got {value}")
        if self.latency_budget_ms is not None and not self.latency_budget_ms >= 0:
            raise DialError(f"latency_budget_ms must be >= 0, got {self.latency_budget_ms!r}")

    @property
    def active(self) -> bool:
        return self.max_tools is not None or self.latency_budget_ms is not None or self.tools is not None

    def describe(self) -> dict:
        """The settings that are set (``{}``: the trained threshold)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def of(cls, settings: dict | None) -> Dial:
        """A dial from :meth:`describe`'s form (a certificate's point); unknown keys refused."""
        settings = dict(settings or {})
        unknown = sorted(set(settings) - {"max_tools", "latency_budget_ms", "tools"})
        if unknown:
            raise DialError(f"unknown dial settings {unknown}")
        return cls(**settings)


def set_dial(plugin, dial: Dial | None):
    """Put ``dial`` on a loaded policy plugin (a router's); refused for a plugin without per-tool scores
    (an LM agent writes a list).  Returns the plugin."""
    if dial is None or not dial.active:
        return plugin
    if not hasattr(plugin, "dial"):
        raise DialError(
            "--tools, --max-tools and --latency-budget-ms need per-tool scores: a router plugin, not an LM's"
        )
    plugin.dial = dial
    return plugin


def recorded_seconds(manifest: dict) -> dict[str, float]:
    """Each tool's measured seconds per clip, as the plugin records them (empty for older plugins)."""
    return {str(k): float(v) for k, v in (manifest.get("tool_seconds") or {}).items()}


def ranking(probs, order) -> list[Subset]:
    """Each query's tools, most probable first (``probs``: ``[B, T]`` in ``order``; ties go to the earlier tool)."""
    out = []
    for row in probs:
        out.append(tuple(order[j] for j in sorted(range(len(order)), key=lambda j: (-float(row[j]), j))))
    return out


def dialled(chosen, probs, order, dial: Dial | None, seconds: dict[str, float] | None) -> list[Subset]:
    """Each query's tools under ``dial``: ``chosen`` ``[B, T]`` the threshold's 0/1 selections, ``probs`` each
    tool's probability, both in ``order``; the result keeps ``order`` (records are shown in that order, so
    the answers a reasoner caches are shared between operating points).  The one function every path
    that selects with a dial calls: the service, ``select``, ``eval`` and the cost curve."""
    ranked = ranking(probs, order)
    if dial is None or not dial.active:
        kept = [tuple(t for t in row if on[order.index(t)] > 0.5) for row, on in zip(ranked, chosen)]
    else:
        budget = None if dial.latency_budget_ms is None else dial.latency_budget_ms / 1000.0
        if dial.tools is not None:
            base = [row[: dial.tools] for row in ranked]
        else:
            base = [tuple(t for t in row if on[order.index(t)] > 0.5) for row, on in zip(ranked, chosen)]
        if budget is not None:
            missing = sorted({t for row in base for t in row if t not in (seconds or {})})
            if missing:
                raise DialError(
                    f"a latency budget needs each tool's measured seconds; this plugin records none for {missing} "
                    "(plugins exported before the dial: use --tools or --max-tools, or re-export)"
                )
        kept = [_cut(row, dial.max_tools, budget, seconds or {}) for row in base]
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


def tool_seconds_of(subsets, seconds: dict[str, float]) -> dict | None:
    """Tool-seconds per answer of ``subsets`` from each tool's measured seconds per clip: ``serial`` (one
    after another, the sum) and ``parallel`` (side by side on the pool, the slowest); None when a called
    tool has no measured seconds."""
    if any(t not in seconds for z in subsets for t in z):
        return None
    n = max(len(subsets), 1)
    serial = sum(sum(seconds[t] for t in z) for z in subsets) / n
    parallel = sum(max((seconds[t] for t in z), default=0.0) for z in subsets) / n
    return {"serial": round(serial, 4), "parallel": round(parallel, 4)}


def certified_dial(manifest: dict) -> Dial | None:
    """The operating point ``autagent adapt --certify`` certified (``manifest["certificate"]["point"]``), the
    plugin's default; None without a certificate (the trained threshold)."""
    certificate = manifest.get("certificate")
    if not isinstance(certificate, dict) or not isinstance(certificate.get("point"), dict):
        return None
    dial = Dial.of(certificate["point"])
    return dial if dial.active else None


def select_at(plugin, samples, dial: Dial | None) -> list[Subset]:
    """``plugin``'s selections on ``samples`` at ``dial`` (None: its trained threshold), its own dial put back after:
    how the cost curve and a certification read an operating point through the code the service runs."""
    kept = plugin.dial
    plugin.dial = dial
    try:
        return [tuple(z) for z in plugin.select_many(samples)]
    finally:
        plugin.dial = kept

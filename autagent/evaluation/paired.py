"""Paired intervals for the difference in accuracy of two methods on the same items.

Why: two methods answered the same questions, so their accuracies are not independent; what tells them
apart is the items on which exactly one of them is right (the discordant pairs).  Two Wilson intervals
side by side overstate the uncertainty when the methods agree on most items and understate nothing
useful; the seeds' spread of a trained method says how much training varies on *these* items, not how
well *these* items stand for the next ones.  So every comparison carries the interval of its own
difference, over items.

The interval is exact and McNemar-based (conditional on the number of discordant pairs ``m``): of the
``m`` items on which the methods disagree, ``b`` favour ``other``; ``b ~ Binomial(m, p)`` and the
difference in accuracy is ``(2b − m) / n``, so a Clopper–Pearson interval for ``p`` maps to one for the
difference, ``((2·p_lo − 1)·m/n, (2·p_hi − 1)·m/n)``.  It holds conditionally on ``m`` for every ``m``,
hence unconditionally; it needs no resampling (the same items always give the same interval) and it is
never empty (``m = 0`` gives ``[0, 0]``: the methods agree on every item).

Its width is about ``±1.96·sqrt(m/n)/sqrt(n)``: the square root of the discordant share over ``n``, the
figure a user sizes a test set with (:func:`certifiable_eps`).
"""

from __future__ import annotations

import math

from scipy.stats import beta, norm


def _clopper_pearson(b: int, m: int, alpha_low: float, alpha_high: float) -> tuple[float, float]:
    """Exact bounds for a binomial proportion with ``alpha_low`` below and ``alpha_high`` above (0: open)."""
    low = 0.0 if b == 0 or alpha_low <= 0 else float(beta.ppf(alpha_low, b, m - b + 1))
    high = 1.0 if b == m or alpha_high <= 0 else float(beta.ppf(1 - alpha_high, b + 1, m - b))
    return low, high


def paired_difference(reference, other, confidence: float = 0.95, sided: str = "two") -> dict:
    """``other``'s accuracy minus ``reference``'s on the same items (lists of booleans, item for item) with
    its exact paired interval: ``sided="two"`` a two-sided ``confidence`` interval, ``"lower"`` a one-sided
    lower bound (the upper end then 1), ``"upper"`` a one-sided upper bound.  Counts ride along: ``other_only``
    (items only ``other`` gets right), ``reference_only``, ``n``."""
    if len(reference) != len(other):
        raise ValueError(f"paired difference over different items: {len(reference)} against {len(other)} answers")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    if sided not in ("two", "lower", "upper"):
        raise ValueError(f"sided must be 'two', 'lower' or 'upper', got {sided!r}")
    n = len(reference)
    b = sum(1 for r, o in zip(reference, other) if o and not r)
    c = sum(1 for r, o in zip(reference, other) if r and not o)
    m = b + c
    alpha = 1 - confidence
    out = {"n": n, "other_only": b, "reference_only": c, "difference": (b - c) / n if n else 0.0}
    if not n:
        return out | {"interval": [0.0, 0.0], "confidence": confidence, "sided": sided, "method": "exact-mcnemar"}
    if m == 0:
        low_p, high_p = 0.5, 0.5  # no discordant pair: the difference is exactly 0 on these items
    else:
        tails = {"two": (alpha / 2, alpha / 2), "lower": (alpha, 0.0), "upper": (0.0, alpha)}[sided]
        low_p, high_p = _clopper_pearson(b, m, *tails)
    low, high = (2 * low_p - 1) * m / n, (2 * high_p - 1) * m / n
    if sided == "lower":
        high = 1.0
    elif sided == "upper":
        low = -1.0
    return out | {
        "interval": [round(low, 4), round(high, 4)],
        "confidence": confidence,
        "sided": sided,
        "method": "exact-mcnemar",
    }


def certifiable_eps(n: int, discordant_share: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest margin ``eps`` such that, for a point truly level with its reference, the one-sided
    ``1 − alpha`` lower bound of the paired difference over ``n`` items lies above ``−eps`` with probability
    ``power``: ``(z_{1−alpha} + z_{power}) · sqrt(d / n)`` with ``d`` the discordant share (the normal
    approximation of the bound above; 2.49·sqrt(d/n) at the defaults)."""
    if n < 1 or not 0 <= discordant_share <= 1:
        raise ValueError(f"certifiable_eps needs n >= 1 and a share in [0, 1], got n={n}, share={discordant_share}")
    return float((norm.ppf(1 - alpha) + norm.ppf(power)) * math.sqrt(discordant_share / n))

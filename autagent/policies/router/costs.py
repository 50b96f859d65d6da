"""What a router plugin records about its tools for the accuracy-for-cost dial (:mod:`autagent.plugin.dial`).

* ``tool_seconds``: each tool's seconds per clip on the exporting machine, from the run's own tool calls
  (the pool times every computed call, model loads amortised over the run's clips); a tool the run
  never computed (its records all cached) takes the warm start's figure, else none is recorded (timing
  it here would load every model in every short run; a latency budget then names the tool).
* ``tool_values``: each tool's average gain **alone** over no tool on the training queries (from the
  answer table when there is one, else asked of the training reasoner through the answer cache): the
  fixed order an evaluation's cost curve compares the learned ranking against.  Training queries only:
  an order chosen on test items would flatter the fixed curve.
"""

from __future__ import annotations

from rewards.scoring import is_correct

from ...reasoners.base import ask_with_records


def tool_seconds(pool, tool_ids, inherited: dict | None = None) -> dict[str, float]:
    """Seconds per clip for each tool the run computed (rounded to the millisecond), else the warm
    start's figure; a tool with neither is left out (a latency budget then names it)."""
    out = {}
    for tool in tool_ids:
        clips = pool.clips.get(tool, 0)
        if clips:
            out[tool] = round(pool.seconds.get(tool, 0.0) / clips, 3)
        elif inherited and tool in inherited:
            out[tool] = float(inherited[tool])
    return out


def tool_values(tool_ids, samples, table=None, reasoner=None, records=None) -> tuple[dict[str, float], str]:
    """(each tool's mean 1[right alone] − 1[right with no tool] over the training queries, where from)."""
    tool_ids = tuple(tool_ids)
    subsets = [()] + [(t,) for t in tool_ids]
    if table is not None:
        items = table.items
        correct = table.correct_matrix(items, subsets)
        source = f"{len(items)} training queries (the answer table)"
    else:
        scorable = [s for s in samples if not s.meta.get("unscorable")]
        n = len(scorable)
        replies = ask_with_records(reasoner, scorable * len(subsets), records, [z for z in subsets for _ in range(n)])
        right = [is_correct(s, r.text) for s, r in zip(scorable * len(subsets), replies)]
        correct = [[float(right[k * n + i]) for k in range(len(subsets))] for i in range(n)]
        source = f"{n} training queries"
    rows = [list(map(float, row)) for row in correct]
    count = max(len(rows), 1)
    values = {t: round(sum(row[j + 1] - row[0] for row in rows) / count, 4) for j, t in enumerate(tool_ids)}
    return values, source

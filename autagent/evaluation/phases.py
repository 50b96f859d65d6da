"""Where a run's time went: the phase table ``make train`` ends with (``timings`` in metrics.json, the
last section of report.md).

:class:`Phases` holds the seconds of each phase in the order they ran; :class:`Clock` stands in for an
object and counts the seconds spent in some of its methods (the reasoner's answers: asked through the
answer cache, and computed by the reasoner itself).
"""

from __future__ import annotations

import time
from contextlib import contextmanager


class Phases:
    """Seconds per phase, in the order the phases first ran."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.started = time.perf_counter()

    @contextmanager
    def __call__(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def total(self) -> float:
        return time.perf_counter() - self.started


class Clock:
    """Stands in for ``inner`` (every attribute is ``inner``'s) and counts in ``seconds`` the time spent
    in its ``methods``, called from outside (calls inside ``inner`` to its own methods are not seen)."""

    def __init__(self, inner, methods: tuple[str, ...]):
        self.inner, self.methods, self.seconds = inner, methods, 0.0

    def __getattr__(self, name: str):
        value = getattr(self.inner, name)
        if name not in self.methods:
            return value

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


def timings_of(phases: Phases, pool, answers: dict[str, float], routers: list[float]) -> dict:
    """metrics.json's ``timings``: the phases (and the total), each tool's calls (``pool``: a
    :class:`tools.pool.ToolPool`), each router's GRPO steps, the reasoner's answers in training and
    evaluation; ``data_s``, ``tools_s``, ``train_s`` and ``eval_s`` as before."""
    seconds = phases.seconds
    old = {"data_s": "benchmark generation", "tools_s": "tool records", "train_s": "training", "eval_s": "evaluation"}
    return {
        **{key: round(seconds[name], 1) for key, name in old.items() if name in seconds},
        "phases": {name: round(s, 1) for name, s in seconds.items()} | {"total": round(phases.total(), 1)},
        "tools": {
            tool: {"busy_s": round(s, 1), "last_s": round(pool.done_at.get(tool, 0.0), 1)}
            for tool, s in pool.seconds.items()
        },
        "ray_start_s": round(pool.ray_start_s, 1),
        "routers": routers,
        "reasoner": {key: round(s, 1) for key, s in answers.items()},
    }


def table(timings: dict) -> list[str]:
    """report.md's section: one row per phase (wall time), the parts of a phase under it (·), and the
    tools' own time apart, as worker time: summed over their calls and replicas, which run side by side,
    so it can exceed the wall time of the phase they ran in."""
    phases, tools = timings.get("phases") or {}, timings.get("tools") or {}
    answers = timings.get("reasoner") or {}
    lines = [
        "",
        "## Where the time went",
        "",
        "Wall: seconds that passed (a · row is part of the phase above it). Worker: seconds a tool's calls "
        "took in its workers, model loads included, summed over its clips and replicas; tools run side by "
        "side, so their worker seconds add up to more than the phase's wall time. Done at: when its last "
        "record came back, in wall seconds from the start of its calls.",
        "",
        "| phase | wall (s) | worker (s) | done at (s) |",
        "|---|---|---|---|",
    ]
    for name, seconds in phases.items():
        lines.append(f"| {'**total**' if name == 'total' else name} | {seconds:.1f} | | |")
        if name == "tool records":
            if timings.get("ray_start_s"):
                lines.append(f"| · Ray start | {timings['ray_start_s']:.1f} | | |")
            for tool, t in tools.items():
                lines.append(f"| · {tool}'s calls | | {t['busy_s']:.1f} | {t['last_s']:.1f} |")
        if name in ("training", "evaluation"):
            for m, seconds_m in enumerate(timings.get("routers", []) if name == "training" else []):
                lines.append(f"| · router {m}: GRPO steps | {seconds_m:.1f} | | |")
            if f"{name}_asked_s" in answers:
                lines.append(
                    f"| · reasoner answers asked (answer cache included) | {answers[f'{name}_asked_s']:.1f} | | |"
                )
                lines.append(f"| · reasoner answers computed | {answers[f'{name}_computed_s']:.1f} | | |")
    return lines

"""Test tools with deterministic faults: one SIGKILLs its own process on its k-th call overall (calls
are counted in a file, so the actor Ray restarts does not kill itself again), one never answers:
faults that depend neither on a timer nor on how fast a machine is."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tools.base import Backend, ToolSpec, package_version


def infer(model, audio, settings):
    counter = Path(settings["counter"])
    with open(counter, "a") as handle:
        handle.write(f"{os.getpid()} {Path(audio.path).name}\n")
    killed = counter.with_suffix(".killed")
    if len(counter.read_text().splitlines()) == settings["kill_at"] and not killed.exists():
        killed.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return {"rms": round(float((audio.samples**2).mean() ** 0.5), 6), "seconds": round(audio.duration, 3)}


def fault_tool(tool_id: str, description: str, infer, **default_settings) -> ToolSpec:
    """A one-backend test tool: cheap to load (no model), ``infer`` decides how it fails."""
    backend = Backend(
        name=tool_id,
        library_version=package_version("numpy"),
        sample_rate=16000,
        load=lambda settings: None,
        infer=infer,
        default_settings=default_settings,
    )
    return ToolSpec(id=tool_id, description=description, backends={"embedded": backend})


SPEC = fault_tool(
    "suicidal", "Measures loudness, and kills its own process once (a test tool).", infer, counter="", kill_at=0
)


def hang(model, audio, settings):
    """Sleeps ``seconds`` on the clip named ``only`` (on every clip when it is empty); logs each call's
    clip to ``counter`` when one is given."""
    import time

    name = Path(audio.path).name
    if settings["counter"]:
        with open(settings["counter"], "a") as handle:
            handle.write(f"{name}\n")
    if settings["only"] in ("", name):
        time.sleep(settings["seconds"])
    return {"seconds": round(audio.duration, 3)}


HANGING = fault_tool("hanging", "Never answers in time (a test tool).", hang, seconds=600, only="", counter="")

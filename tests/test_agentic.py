"""Tools a model calls itself: every tool as an OpenAI function tool, a time window honoured by cutting
the clip and cached per window, and a plugin's manifest listing the function tools."""

from __future__ import annotations

import json

import pytest
import torch

from autagent.policies.router.features import Featurizer
from autagent.policies.router.model import Router, RouterConfig
from autagent.policies.router.plugin import export_router

TOOLS = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")


def _plugin(folder, biases, tools=TOOLS):
    torch.manual_seed(0)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(), len(tools))
    with torch.no_grad():
        router.net[-1].bias.copy_(torch.tensor(biases))
    return export_router(folder, router, featurizer, tools, "embedded", {}, 30.0, {"name": "agentic-test"})


def test_every_registered_tool_is_an_openai_function_tool_whose_only_arguments_are_a_window():
    from tools import registered
    from tools.window import Window, WindowError

    for spec in registered():
        tool = spec.function
        assert tool["type"] == "function" and tool["function"]["name"] == spec.id
        assert tool["function"]["description"].startswith(spec.description.strip())
        schema = tool["function"]["parameters"]
        assert set(schema["properties"]) == {"start", "end"} and schema["additionalProperties"] is False
        assert not schema.get("required")
    assert Window.from_arguments({}) is None and Window.from_arguments({"start": 0}) is None
    assert Window.from_arguments({"start": 1.5, "end": 4}) == Window(1.5, 4.0)
    assert Window.from_arguments({"start": 2}) == Window(2.0, None)
    for bad, words in (
        ({"start": -1}, "start must be a number of seconds >= 0, got -1"),
        ({"end": "soon"}, "end must be a number"),
        ({"start": 3, "end": 2}, "end (2 s) must be after start (3 s)"),
        ({"start": True}, "start must be a number"),
        ({"clip": "/etc/passwd"}, "unknown arguments ['clip']"),
        ([1, 2], "must be a JSON object"),
    ):
        with pytest.raises(WindowError) as caught:
            Window.from_arguments(bad)
        assert words in str(caught.value)


def test_a_window_is_cut_from_the_clip_and_cached_under_the_clip_and_the_window(tmp_path, click_wav):
    """Clicks at 120 BPM over 10 s: the tempo tool given 2-6 s hears four seconds of them (beats inside
    0-4 s), the same window again is a cache hit, the whole clip keeps its own record, and a window
    after the clip's end is an error record naming the clip and the window."""
    from tools.pool import PoolConfig, ToolPool
    from tools.window import Window

    path = str(click_wav[0])
    pool = ToolPool(PoolConfig(executor="local", cache_dir=str(tmp_path / "cache"), enabled=["tempo"]))
    whole = pool.run(path, ["tempo"])["tempo"]
    part = pool.run(path, ["tempo"], Window(2.0, 6.0))["tempo"]
    assert part["window"] == {"start": 2.0, "end": 6.0} and "window" not in whole
    assert max(part["output"]["beats"]) < 4.0 < max(whole["output"]["beats"])
    assert abs(part["output"]["bpm"] - 120) < 6
    computed = pool.computed
    assert pool.run(path, ["tempo"], Window(2.0, 6.0))["tempo"] == part and pool.computed == computed
    assert pool.run(path, ["tempo"])["tempo"] == whole and pool.computed == computed
    late = pool.run(path, ["tempo"], Window(60.0, None))["tempo"]
    assert late["error"] == f"{path}: the window starts at 60 s, after the clip ends (10.00 s)"
    assert not list((tmp_path / "cache" / ".windows").iterdir())  # no cut is left behind


def test_a_plugins_manifest_lists_its_tools_as_function_tools(tmp_path):
    from tools.registry import function_tools

    plugin = _plugin(tmp_path / "p", [0.0] * len(TOOLS))
    manifest = json.loads((plugin / "manifest.json").read_text())
    assert manifest["function_tools"] == function_tools(TOOLS)
    assert [t["function"]["name"] for t in manifest["function_tools"]] == list(TOOLS)

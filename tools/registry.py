"""The tool registry: the project's tools, tools from installed packages, and tools named in config.

Three sources, in this order:

* the project's own tools (``tools/asr.py`` ... ``tools/speakers.py``);
* installed packages, through the entry-point group ``autagent.tools``: each entry point names a
  :class:`~tools.base.ToolSpec`, a list of them, or a function returning either;
* ``tools.extra: ["module:attr"]`` in a run's config, for a tool in a plain module.

A run picks its library with ``tools.enabled`` (ids, in the order the policy's outputs follow);
:func:`resolve` checks that every id is registered and returns that tuple.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterable

from .base import ToolSpec

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "autagent.tools"
PAPER_TOOLS: tuple[str, ...] = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")
BUILTIN_MODULES = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers")

_tools: dict[str, ToolSpec] = {}
_origins: dict[str, str] = {}
_lock = threading.Lock()
_loaded_builtins = False
_loaded_entry_points = False
load_errors: list[str] = []  # entry points that failed to load (reported by `autagent tools list`)


class ToolRegistryError(ValueError):
    pass


class UnknownToolError(ToolRegistryError, KeyError):
    """A tool id nothing registered (``--tools tempoo``): a :class:`ToolRegistryError`, so the command line
    says it in one line, and a ``KeyError`` for callers that look a tool up."""

    def __str__(self) -> str:  # a KeyError's str() would quote the whole message
        return str(self.args[0]) if self.args else ""


def register(spec: ToolSpec, origin: str = "code") -> ToolSpec:
    """Add ``spec``; registering another tool under a taken id is an error naming both origins."""
    if not isinstance(spec, ToolSpec):
        raise ToolRegistryError(f"{origin}: expected a tools.base.ToolSpec, got {type(spec).__name__}")
    with _lock:
        known = _tools.get(spec.id)
        if known is not None and known is not spec:
            raise ToolRegistryError(f"tool id {spec.id!r} from {origin} is already registered by {_origins[spec.id]}")
        _tools[spec.id] = spec
        _origins[spec.id] = origin
    return spec


def _specs_from(obj, origin: str) -> list[ToolSpec]:
    if callable(obj) and not isinstance(obj, ToolSpec):
        obj = obj()
    items = obj if isinstance(obj, (list, tuple)) else [obj]
    bad = [type(x).__name__ for x in items if not isinstance(x, ToolSpec)]
    if bad:
        raise ToolRegistryError(f"{origin}: expected ToolSpec objects, got {', '.join(bad)}")
    return list(items)


def _load_builtins() -> None:
    global _loaded_builtins
    if _loaded_builtins:
        return
    for name in BUILTIN_MODULES:
        module = importlib.import_module(f"tools.{name}")
        register(module.SPEC, f"tools.{name}")
    _loaded_builtins = True


def _load_entry_points() -> None:
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {ep.name} ({ep.value})"
        try:
            for spec in _specs_from(ep.load(), origin):
                register(spec, origin)
        except Exception as err:  # noqa: BLE001 - a broken plug-in must not take the project down
            load_errors.append(f"{origin}: {type(err).__name__}: {err}")
            log.warning("could not load tool %s: %s", origin, err)


def load_extra(references: Iterable[str]) -> list[str]:
    """Register tools named ``"module:attr"``; returns their ids.  Errors name the reference."""
    ids = []
    for ref in references or ():
        module_name, _, attr = str(ref).partition(":")
        if not module_name or not attr:
            raise ToolRegistryError(f"tools.extra: {ref!r} must look like 'module:attr'")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise ToolRegistryError(f"tools.extra: cannot load {ref!r} ({type(err).__name__}: {err})") from err
        for spec in _specs_from(obj, f"tools.extra {ref}"):
            register(spec, f"tools.extra {ref}")
            ids.append(spec.id)
    return ids


def ensure_loaded(extra: Iterable[str] = ()) -> None:
    _load_builtins()
    _load_entry_points()
    if extra:
        load_extra(extra)


def get_tool(tool_id: str) -> ToolSpec:
    ensure_loaded()
    try:
        return _tools[tool_id]
    except KeyError:
        raise UnknownToolError(f"unknown tool {tool_id!r}; registered tools: {', '.join(sorted(_tools))}") from None


def label_of(tool_id: str) -> str:
    """The tool's label for plots and reports (``Tempo (BPM)``), its id when it is not registered: a
    record read from an old run may name a tool this install does not have."""
    try:
        return get_tool(tool_id).label
    except KeyError:
        return tool_id


def registered() -> list[ToolSpec]:
    """Every registered tool: the paper's first, in the paper's order, then the rest by id."""
    ensure_loaded()
    order = {t: i for i, t in enumerate(PAPER_TOOLS)}
    return sorted(_tools.values(), key=lambda s: (order.get(s.id, len(order)), s.paper_index or 99, s.id))


def function_tools(tool_ids: Iterable[str]) -> list[dict]:
    """The OpenAI function-tool definitions of ``tool_ids``, in that order (:attr:`ToolSpec.function`)."""
    return [get_tool(t).function for t in tool_ids]


def origin(tool_id: str) -> str:
    get_tool(tool_id)
    return _origins[tool_id]


def resolve(enabled: Iterable[str] | None, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The run's tool ids, in order: ``enabled`` (default: the paper's six), each one registered."""
    ensure_loaded(extra)
    ids = tuple(enabled) if enabled else PAPER_TOOLS
    missing = [t for t in ids if t not in _tools]
    if missing:
        raise ToolRegistryError(
            f"tools.enabled names unregistered tools {missing}; registered: {', '.join(sorted(_tools))}"
        )
    if len(set(ids)) != len(ids):
        raise ToolRegistryError(f"tools.enabled repeats a tool: {list(ids)}")
    return ids


def parse_tool_list(text: str | None, toolset: Iterable[str] = PAPER_TOOLS) -> list[str]:
    """``"asr,chords"`` -> ``["asr", "chords"]`` in the toolset's order; None or "all" -> the whole toolset."""
    toolset = tuple(toolset)
    if text is None or text.strip() in ("", "all"):
        return list(toolset)
    wanted = [t.strip() for t in text.split(",") if t.strip()]
    for tool_id in wanted:
        get_tool(tool_id)
    outside = [t for t in wanted if t not in toolset]
    return [t for t in toolset if t in wanted] + outside

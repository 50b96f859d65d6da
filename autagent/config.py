"""Typed run configuration: one YAML file fully describes a run (torchtune's recipe + config).

Every section is a dataclass with a docstring per field.  Unknown or mistyped keys, unknown kinds,
unknown methods and out-of-range values fail when the config loads, naming the file and the dotted
field, before any work starts.  The run directory keeps the resolved config (``config.yaml``).

Settings only one policy reads live in its section (``policy.router``, ``policy.lm``: why, in
:mod:`autagent.policies.router.config`).  A user's config or ``--set`` naming a key that moved there is
refused with the new key (:data:`autagent.policies.grpo.MOVED_KEYS`); a plugin's recorded training config,
written before the move, is migrated on read (:func:`migrate_moved`).
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rewards import RewardConfig
from tools.pool import PoolConfig
from tools.registry import resolve

from .data.config import DataConfig
from .data.user_cache import cache_path, portable
from .evaluation.harness import EvalConfig, check_methods
from .policies import PolicyConfig
from .policies.grpo import MOVED_KEYS, GRPOConfig, moved_key
from .policies.router.config import RouterGRPOConfig
from .reasoners import ReasonerConfig


class ConfigError(ValueError):
    pass


@dataclass
class LoggingConfig:
    wandb: bool = True
    """Log to Weights & Biases."""
    wandb_mode: str = "offline"
    """offline | online | disabled."""
    project: str = "autagent"
    """W&B project."""
    progress: bool = True
    """Progress bars."""

    def __post_init__(self):
        if self.wandb_mode not in ("offline", "online", "disabled"):
            raise ValueError(f"logging.wandb_mode must be offline, online or disabled, got {self.wandb_mode!r}")


@dataclass
class LauncherConfig:
    """How ``autagent train`` starts: in this process, or re-launched under ``accelerate launch``."""

    kind: str = "python"
    """python | accelerate."""
    accelerate_config: str | None = None
    """e.g. experiments/accelerate/zero2.yaml."""
    num_processes: int | None = None
    """Default: the accelerate config's."""

    def __post_init__(self):
        if self.kind not in ("python", "accelerate"):
            raise ValueError(f"launcher.kind must be 'python' or 'accelerate', got {self.kind!r}")


@dataclass
class RunConfig:
    name: str = "embedded_main"
    """Run name: the run directory is ``<output_dir>/<name>``."""
    output_dir: str = "runs"
    """Parent of run directories."""
    seed: int = 0
    """Policy initialisation, batches and sampling."""
    data: DataConfig = field(default_factory=DataConfig)
    """Datasets."""
    tools: PoolConfig = field(default_factory=PoolConfig)
    """The tool library, its backends and the Ray pool."""
    reasoner: ReasonerConfig = field(default_factory=ReasonerConfig)
    """The frozen reasoner training uses."""
    eval_reasoner: ReasonerConfig | None = None
    """Transfer: evaluate the plugin with a different reasoner."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """The tool-selection policy."""
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    """GRPO hyper-parameters and the advantage estimator."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Logging."""
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    """Launcher."""
    answer_cache_dir: str = ".cache/answers"
    """Reasoner answers, keyed by clip content, question, choices, records and reasoner fingerprint
    (``.cache/...``: under the per-user cache folder, as every path of :data:`CACHE_FIELDS`)."""
    checkpoint_every: int = 1
    """Steps between checkpoints."""

    def __post_init__(self):
        if not self.name or "/" in self.name or self.name in (".", ".."):
            raise ValueError(f"name must be a plain folder name, got {self.name!r}")
        check_methods(self.eval.methods, self.tools.tool_ids)

        added = resolve(self.eval.add_tools, self.tools.extra) if self.eval.add_tools else ()
        clash = [t for t in added if t in self.tools.tool_ids]
        if clash:
            raise ValueError(f"eval.add_tools: {clash} are already in tools.enabled")
        if self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {self.checkpoint_every}")
        # an LM policy at 0 steps is its model as it starts: its zero-shot self, exported untrained (issue 65)
        if self.grpo.steps == 0 and not self.policy.init_from and self.policy.kind != "lm":
            raise ValueError("grpo.steps: 0 trains nothing: it exports the plugin of policy.init_from unchanged")
        router = self.policy.router
        if self.reward.signal == "confidence" and not (self.policy.kind == "router" and router.objective == "expected"):
            raise ValueError(
                "reward.signal: confidence reads the answer table's choice scores: policy.kind: router with "
                "policy.router.objective: expected"
            )
        if self.policy.kind == "router":
            RouterGRPOConfig.join(self.grpo, router)  # the router trainer's settings, checked together
        for owner, name in _cache_fields(self):  # the same caches from every folder (autagent.data.user_cache)
            setattr(owner, name, cache_path(getattr(owner, name)))

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


CACHE_FIELDS = (
    "answer_cache_dir",
    "tools.cache_dir",
    "reasoner.cascade.cache_dir",
    "eval_reasoner.cascade.cache_dir",
    "eval.agentic.audio_dir",
)
"""The config's cache folders: a value starting ``.cache/`` names a folder under the per-user cache
(:func:`autagent.data.user_cache.cache_path`), resolved when the config is built and recorded in that form
(:func:`to_dict`)."""


def _cache_fields(config) -> list[tuple[object, str]]:
    """(section, field) of each of :data:`CACHE_FIELDS` that ``config`` has (no ``eval_reasoner``: none)."""
    out = []
    for dotted in CACHE_FIELDS:
        *parents, leaf = dotted.split(".")
        owner = config
        for part in parents:
            owner = getattr(owner, part, None)
        if owner is not None and isinstance(getattr(owner, leaf, None), str):
            out.append((owner, leaf))
    return out


def _is_dataclass_type(tp) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _unwrap_optional(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def from_dict(cls, data: dict, where: str = "", source: str = "config"):
    """Build dataclass ``cls`` from ``data``, recursively; unknown keys raise ConfigError naming them."""
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {where or 'top level'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(map(str, data)) - names)
    if unknown:
        raise ConfigError(
            f"{source}: unknown field {where + '.' if where else ''}{unknown[0]}; "
            f"known fields{' of ' + where if where else ''}: {', '.join(sorted(names))}"
        )
    kwargs = {}
    for key, value in data.items():
        tp = _unwrap_optional(hints[key])
        dotted = f"{where}.{key}" if where else key
        if _is_dataclass_type(tp) and value is not None:
            kwargs[key] = from_dict(tp, value, dotted, source)
        else:
            kwargs[key] = _check_scalar(tp, value, dotted, source)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError) as err:
        # a KeyError's str() wraps its message in quotes; a ValueError's message is kept whole (its own
        # closing quote included: "got 'lmm'")
        message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        raise ConfigError(f"{source}: {where + ': ' if where and where not in message else ''}{message}") from err


def _check_scalar(tp, value, dotted: str, source: str):
    if value is None:
        return None
    expected = {int: (int,), float: (int, float), str: (str,), bool: (bool,), list: (list, tuple), dict: (dict,)}.get(
        tp
    )
    if expected and (not isinstance(value, expected) or (tp is not bool and isinstance(value, bool))):
        raise ConfigError(f"{source}: field {dotted} expects {tp.__name__}, got {value!r}")
    if tp is float and value != value:  # NaN
        raise ConfigError(f"{source}: field {dotted} is NaN")
    return float(value) if tp is float else list(value) if tp is list else value


MAX_ALIAS_VALUES = 10_000
"""How many values YAML aliases may add to a config file beyond its own length in characters (a file
without aliases has fewer values than characters).  A 398-byte file of nested aliases once expanded to a
22 MB config.yaml when the run saved it (every alias written out)."""


def _expands_past(data, limit: int) -> bool:
    """Whether ``data``, every alias written out, holds more than ``limit`` values (walked without recursion,
    stopping at the limit)."""
    stack, seen = [data], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> RunConfig:
    """Read a YAML run config (defaults when ``path`` is None) and apply dotted ``overrides``."""
    data: dict = {}
    source = "defaults"
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        try:
            text = path.read_text()
            data = yaml.safe_load(text) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path}: invalid YAML ({err})") from err
        if _expands_past(data, len(text) + MAX_ALIAS_VALUES):
            raise ConfigError(
                f"{path}: its YAML aliases (*name) expand to more than {MAX_ALIAS_VALUES} values beyond what is "
                "written (an alias bomb?); write the values out"
            )
        source = str(path)
    return config_from_mapping(data, overrides, source)


def _lookup(data: dict, dotted: str):
    """``data``'s value at ``dotted`` (``KeyError`` when a part is missing or not a mapping)."""
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def check_moved(data: dict, overrides: dict | None, source: str) -> None:
    """One line naming the new key for any key of ``overrides`` or ``data`` that moved to a policy's section."""
    for dotted in overrides or {}:
        new = moved_key(dotted)
        if new is not None:
            raise ConfigError(f"{source}: --set {dotted}: moved to {new} (the policy that reads it); set that")
    for old, new in MOVED_KEYS.items():
        try:
            _lookup(data, old)
        except KeyError:
            continue
        raise ConfigError(f"{source}: {old} moved to {new} (the policy that reads it); rename it there")


def migrate_moved(data: dict) -> dict:
    """A copy of a recorded config (a plugin's ``training_config``) with each moved key at its new place, and
    the cross-validation grid's keys renamed the same way."""
    data = copy.deepcopy(data)
    for old, new in MOVED_KEYS.items():
        *parents, leaf = old.split(".")
        try:
            node = _lookup(data, ".".join(parents)) if parents else data
            value = node.pop(leaf)
        except (KeyError, AttributeError):
            continue
        *new_parents, new_leaf = new.split(".")
        target = data
        for part in new_parents:
            target = target.setdefault(part, {})
        target[new_leaf] = value
    try:
        crossval = _lookup(data, "policy.router.table.crossval")
    except KeyError:
        return data
    if isinstance(crossval, dict) and isinstance(crossval.get("grid"), dict):
        crossval["grid"] = {moved_key(k) or k: v for k, v in crossval["grid"].items()}
    return data


def config_from_mapping(data, overrides: dict | None = None, source: str = "config") -> RunConfig:
    """A :class:`RunConfig` from a mapping (a YAML file's, a plugin's recorded training config after
    :func:`migrate_moved`) with dotted ``overrides`` applied to a copy of it."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(data).__name__}")
    check_moved({}, overrides, source)
    data = copy.deepcopy(data)
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{source}: --set {dotted}: {part} is not a section")
        node[leaf] = value
    check_moved(data, None, source)
    return from_dict(RunConfig, data, source=source)


def to_dict(config) -> dict:
    """The config as plain data, its cache folders in their portable ``.cache/...`` form: a run folder's
    config.yaml and a plugin's training config name no one's home folder (read back, they resolve to the
    reader's own cache)."""
    data = dataclasses.asdict(config)
    for dotted in CACHE_FIELDS if isinstance(config, RunConfig) else ():
        *parents, leaf = dotted.split(".")
        node = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(leaf), str):
            node[leaf] = portable(node[leaf])
    return data


def save_config(config: RunConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))

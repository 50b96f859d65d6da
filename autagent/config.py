"""Typed run configuration: one YAML file fully describes a run (torchtune's recipe + config).

Every section is a dataclass; unknown or mistyped keys fail loudly, naming the file and the
dotted field.  The run directory keeps the resolved config (``config.yaml``).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tools.pool import PoolConfig

from .data.embedded import EmbeddedBenchmarkConfig
from .grpo import GRPOConfig
from .policies.router import RouterConfig
from .reasoners.embedded import EmbeddedReasonerConfig


class ConfigError(ValueError):
    pass


@dataclass
class DataConfig:
    """Where samples come from: dataset files (MMAU/MMAR/AVQA), or the embedded benchmark's splits."""

    train: str | None = None
    dev: str | None = None
    test: str | None = None
    format: str = "auto"
    limit_train: int | None = None
    limit_dev: int | None = None
    limit_test: int | None = None
    benchmark: EmbeddedBenchmarkConfig = field(default_factory=EmbeddedBenchmarkConfig)


@dataclass
class Qwen2AudioConfig:
    model_id: str = "Qwen/Qwen2-Audio-7B-Instruct"
    device: str = "cuda"
    dtype: str = "bfloat16"
    max_new_tokens: int = 32
    batch_size: int = 4


@dataclass
class OpenAIConfig:
    base_url: str = "http://localhost:8000/v1"  # vLLM's OpenAI server; https://api.openai.com/v1 for GPT-4o
    model: str = "Qwen/Qwen2-Audio-7B-Instruct"
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this variable, never from config or logs
    audio_format: str = "input_audio"  # "input_audio" (OpenAI) or "audio_url" (vLLM data URL)
    max_concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 3
    temperature: float = 0.0
    max_tokens: int = 32


@dataclass
class ReasonerConfig:
    kind: str = "embedded"  # embedded | qwen2-audio | openai
    embedded: EmbeddedReasonerConfig = field(default_factory=EmbeddedReasonerConfig)
    qwen2_audio: Qwen2AudioConfig = field(default_factory=Qwen2AudioConfig)
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)


@dataclass
class RewardConfig:
    kind: str = "differential"  # differential | binary
    tool_cost: float = 0.0


@dataclass
class EvalConfig:
    methods: list = field(default_factory=lambda: ["no_tool", "random", "all_tools", "tools_desc", "single",
                                                   "oracle_single", "oracle_subsets", "policy"])
    random_seed: int = 0
    desc_margin: float = 0.05  # tools-with-descriptions: pick tools within this similarity of the best...
    desc_floor: float = 0.15  # ...and at least this similar to the question
    plots: bool = True


@dataclass
class LoggingConfig:
    wandb: bool = True
    wandb_mode: str = "offline"  # offline | online | disabled
    project: str = "autagent"
    progress: bool = True


@dataclass
class PolicyConfig:
    kind: str = "router"  # router | lm
    router: RouterConfig = field(default_factory=RouterConfig)
    lm: dict = field(default_factory=dict)  # fields of autagent.policies.lm.LMPolicyConfig (checked when used)


@dataclass
class LauncherConfig:
    """How ``autagent train`` starts: in this process, or re-launched under ``accelerate launch``."""

    kind: str = "python"  # python | accelerate
    accelerate_config: str | None = None  # e.g. experiments/accelerate/zero2.yaml
    num_processes: int | None = None  # default: the accelerate config's

    def __post_init__(self):
        if self.kind not in ("python", "accelerate"):
            raise ValueError(f"launcher.kind must be 'python' or 'accelerate', got {self.kind!r}")


@dataclass
class RunConfig:
    name: str = "embedded_main"
    output_dir: str = "runs"
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    tools: PoolConfig = field(default_factory=PoolConfig)
    reasoner: ReasonerConfig = field(default_factory=ReasonerConfig)
    eval_reasoner: ReasonerConfig | None = None  # transfer: evaluate the plugin with a different reasoner
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    answer_cache_dir: str = ".cache/answers"
    checkpoint_every: int = 1

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


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
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown field {where + '.' if where else ''}{unknown[0]}; "
                          f"known fields{' of ' + where if where else ''}: {', '.join(sorted(names))}")
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
    except (TypeError, ValueError, KeyError) as err:
        raise ConfigError(f"{source}: {where or 'top level'}: {err}") from err


def _check_scalar(tp, value, dotted: str, source: str):
    if value is None:
        return None
    expected = {int: (int,), float: (int, float), str: (str,), bool: (bool,), list: (list, tuple), dict: (dict,)}.get(tp)
    if expected and (not isinstance(value, expected) or (tp is not bool and isinstance(value, bool))):
        raise ConfigError(f"{source}: field {dotted} expects {tp.__name__}, got {value!r}")
    return float(value) if tp is float else value


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> RunConfig:
    """Read a YAML run config (defaults when ``path`` is None) and apply dotted ``overrides``."""
    data: dict = {}
    source = "defaults"
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"{path}: config file not found")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: invalid YAML ({err})") from err
        source = str(path)
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return from_dict(RunConfig, data, source=source)


def to_dict(config) -> dict:
    return dataclasses.asdict(config)


def save_config(config: RunConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))

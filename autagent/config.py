"""Typed run configuration: one YAML file fully describes a run (torchtune's recipe + config).

Every section is a dataclass with a docstring per field.  Unknown or mistyped keys, unknown kinds,
unknown methods and out-of-range values fail when the config loads, naming the file and the dotted
field, before any work starts.  The run directory keeps the resolved config (``config.yaml``).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tools.pool import PoolConfig

from .data.bench import EmbeddedBenchmarkConfig
from .grpo import GRPOConfig
from .policies.router import RouterConfig
from .reasoners.embedded import EmbeddedReasonerConfig


class ConfigError(ValueError):
    pass


@dataclass
class DataConfig:
    """Where samples come from: dataset files (MMAU/MMAR/AVQA), or the embedded benchmark's splits.

    A config that names any file never generates the embedded benchmark."""

    train: str | None = None
    """Training file (required for training whenever any file is named)."""
    dev: str | None = None
    """Dev file; when absent, ``dev_fraction`` of train is held out (or dev evaluation is skipped)."""
    test: str | None = None
    """Test file; when absent, the run trains and exports but evaluates nothing."""
    format: str = "auto"
    """mmau | mmar | avqa | auto (from the first row's fields)."""
    limit_train: int | None = None
    """Use only the first N rows (for quick runs)."""
    limit_dev: int | None = None
    """Use only the first N rows."""
    limit_test: int | None = None
    """Use only the first N rows."""
    dev_fraction: float = 0.0
    """With no dev file: the share of train held out as dev (0: no dev evaluation)."""
    dev_seed: int = 0
    """Seed of that hold-out (printed in the log)."""
    audio_wording: bool = False
    """AVQA: ask about "the audio" where the question says "the video" (r1-aqa's wording)."""
    benchmark: EmbeddedBenchmarkConfig = field(default_factory=EmbeddedBenchmarkConfig)
    """The embedded benchmark, used only when no file is named."""

    def __post_init__(self):
        if self.format not in ("auto", "mmau", "mmar", "avqa"):
            raise ValueError(f"data.format must be auto, mmau, mmar or avqa, got {self.format!r}")
        if not 0.0 <= self.dev_fraction < 1.0:
            raise ValueError(f"data.dev_fraction must be in [0, 1), got {self.dev_fraction}")
        for name in ("limit_train", "limit_dev", "limit_test"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"data.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def uses_files(self) -> bool:
        return any(p is not None for p in (self.train, self.dev, self.test))


@dataclass
class Qwen2AudioConfig:
    model_id: str = "Qwen/Qwen2-Audio-7B-Instruct"
    """Hub id or local folder."""
    device: str = "cuda"
    """Torch device."""
    dtype: str = "bfloat16"
    """Torch dtype name."""
    max_new_tokens: int = 32
    """Reply length."""
    batch_size: int = 4
    """Prompts per generate call (left-padded)."""


@dataclass
class OpenAIConfig:
    base_url: str = "http://localhost:8000/v1"
    """vLLM's OpenAI server, or https://api.openai.com/v1 for GPT-4o."""
    model: str = "Qwen/Qwen2-Audio-7B-Instruct"
    """Model name the server expects."""
    api_key_env: str = "OPENAI_API_KEY"
    """The key is read from this variable, never from config, and never written anywhere."""
    audio_format: str = "input_audio"
    """input_audio (OpenAI) or audio_url (vLLM data URL)."""
    max_concurrency: int = 8
    """Requests in flight at once."""
    timeout_s: float = 60.0
    """Per request."""
    max_retries: int = 3
    """Retries per request (429, 5xx, timeouts, resets, malformed JSON); then the request is an error."""
    backoff_s: float = 0.5
    """First back-off; doubles per retry."""
    max_backoff_s: float = 8.0
    """Cap on one back-off, Retry-After included."""
    temperature: float = 0.0
    """Sampling temperature."""
    max_tokens: int = 32
    """Reply length."""

    def __post_init__(self):
        if self.audio_format not in ("input_audio", "audio_url"):
            raise ValueError(f"reasoner.openai.audio_format must be input_audio or audio_url, got {self.audio_format!r}")
        if self.max_retries < 0 or self.timeout_s <= 0 or self.max_concurrency < 1:
            raise ValueError("reasoner.openai: max_retries >= 0, timeout_s > 0 and max_concurrency >= 1")


@dataclass
class ReasonerConfig:
    kind: str = "embedded"
    """embedded | qwen2-audio | openai."""
    embedded: EmbeddedReasonerConfig = field(default_factory=EmbeddedReasonerConfig)
    """Settings of the embedded simulator."""
    qwen2_audio: Qwen2AudioConfig = field(default_factory=Qwen2AudioConfig)
    """Settings of Qwen2-Audio in process."""
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    """Settings of an OpenAI-compatible endpoint."""

    def __post_init__(self):
        from .reasoners import KINDS

        if self.kind not in KINDS:
            raise ValueError(f"reasoner.kind must be one of {list(KINDS)}, got {self.kind!r}")


@dataclass
class RewardConfig:
    kind: str = "differential"
    """differential (1[ŷ = y*] − 1[y_base = y*]) or binary (1[ŷ = y*])."""
    tool_cost: float = 0.0
    """Subtracted per called tool. 0 is the paper's reward; the embedded configs use 0.05, because
    without a price a router that cannot tell when tools help calls several of them anyway and loses
    little (README, "Tool cost")."""

    def __post_init__(self):
        from rewards import REWARDS

        if self.kind not in REWARDS:
            raise ValueError(f"reward.kind must be one of {sorted(REWARDS)}, got {self.kind!r}")
        if not isinstance(self.tool_cost, (int, float)) or not 0 <= self.tool_cost < 1:
            raise ValueError(f"reward.tool_cost must be a number in [0, 1), got {self.tool_cost!r}")


@dataclass
class EvalConfig:
    methods: list = field(default_factory=lambda: ["no_tool", "random", "all_tools", "tools_desc", "single",
                                                   "oracle_single", "oracle_subsets", "oracle_kind", "policy"])
    """Baselines to run (see autagent.evaluate.METHODS; single:<tool> for one tool)."""
    random_seed: int = 0
    """Seed of the Random Selection baseline."""
    desc_margin: float = 0.05
    """Tools-with-descriptions: pick tools within this similarity of the best..."""
    desc_floor: float = 0.15
    """...and at least this similar to the question."""
    oracle_max_size: int | None = None
    """Largest subset the all-subsets oracle tries (None: every subset up to 8 tools, pairs beyond)."""
    plots: bool = True
    """Write the PNG plots."""


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
class PolicyConfig:
    kind: str = "router"
    """router (the embedded default) | lm (the paper's Qwen2-Audio agent on TRL)."""
    router: RouterConfig = field(default_factory=RouterConfig)
    """The router's settings."""
    lm: dict = field(default_factory=dict)
    """Fields of autagent.policies.lm.config.LMPolicyConfig (checked when the config loads)."""

    def __post_init__(self):
        if self.kind not in ("router", "lm"):
            raise ValueError(f"policy.kind must be 'router' or 'lm', got {self.kind!r}")
        from .policies.lm.config import LMPolicyConfig

        try:
            from_dict(LMPolicyConfig, self.lm, "policy.lm", source="")
        except ConfigError as err:  # re-raised by the enclosing from_dict with the file's name
            raise ValueError(str(err).removeprefix(": ")) from None


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
    """Reasoner answers, keyed by clip content, question, choices, records and reasoner fingerprint."""
    checkpoint_every: int = 1
    """Steps between checkpoints."""

    def __post_init__(self):
        from .evaluate import check_methods

        if not self.name or "/" in self.name or self.name in (".", ".."):
            raise ValueError(f"name must be a plain folder name, got {self.name!r}")
        check_methods(self.eval.methods, self.tools.tool_ids)
        if self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {self.checkpoint_every}")

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
    unknown = sorted(set(map(str, data)) - names)
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
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError) as err:
        message = str(err).strip("'\"")
        raise ConfigError(f"{source}: {where + ': ' if where and where not in message else ''}{message}") from err


def _check_scalar(tp, value, dotted: str, source: str):
    if value is None:
        return None
    expected = {int: (int,), float: (int, float), str: (str,), bool: (bool,), list: (list, tuple), dict: (dict,)}.get(tp)
    if expected and (not isinstance(value, expected) or (tp is not bool and isinstance(value, bool))):
        raise ConfigError(f"{source}: field {dotted} expects {tp.__name__}, got {value!r}")
    if tp is float and value != value:  # NaN
        raise ConfigError(f"{source}: field {dotted} is NaN")
    return float(value) if tp is float else list(value) if tp is list else value


def load_config(path: str | Path | None = None, overrides: dict | None = None) -> RunConfig:
    """Read a YAML run config (defaults when ``path`` is None) and apply dotted ``overrides``."""
    data: dict = {}
    source = "defaults"
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path}: invalid YAML ({err})") from err
        source = str(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(data).__name__}")
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{source}: --set {dotted}: {part} is not a section")
        node[leaf] = value
    return from_dict(RunConfig, data, source=source)


def to_dict(config) -> dict:
    return dataclasses.asdict(config)


def save_config(config: RunConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))

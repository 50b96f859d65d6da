"""What a run's tool pool is (``tools:`` of a run's config): which tools, how they run, where their records
are cached, and the Ray resources of their actors (:class:`tools.pool.ToolPool` runs them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .registry import resolve


@dataclass
class PoolConfig:
    """Which tools a run uses and how they run: profile and settings, the cache, Ray resources."""

    enabled: list | None = None
    """The run's tool library, in the order the policy's outputs follow. Left out (None): the paper's
    six, or, where a plugin is given (eval, answer, serve), the tools the plugin was trained with."""
    extra: list = field(default_factory=list)
    """Tools from plain modules, as ``"module:attr"`` naming a ToolSpec (or a list of them)."""
    profile: str = "embedded"
    """``embedded`` (offline, shipped weights) or ``cluster`` (the paper's models)."""
    settings: dict = field(default_factory=dict)
    """Tool id -> backend setting overrides (model_id, device...)."""
    max_seconds: float = 30.0
    """Clips are cut to this length before any tool sees them."""
    cache_dir: str = ".cache/tools"
    """The content-addressed record cache shared by every run."""
    cache_max_mb: float | None = 20480.0
    """The record cache is kept under this size, least recently used first (None: unbounded)."""
    executor: str = "ray"
    """``ray`` (actors) or ``local`` (in this process, sequential)."""
    timeout_s: float = 300.0
    """A call fails (error record, actor restarted) when no call finishes for this long; in process
    (``executor: local``) a call fails when it has not returned within it (its model reloaded)."""
    actor_cpus: float = 0.25
    """CPUs Ray reserves per actor."""
    gpu_fraction: dict = field(default_factory=dict)
    """Tool id -> GPUs per actor, e.g. ``{"asr": 0.5}``."""
    replicas: dict = field(default_factory=dict)
    """Tool id -> number of actors (default 1), e.g. ``{"asr": 2}``."""
    batch_size: dict = field(default_factory=dict)
    """Tool id -> clips per actor call (default 8); backends with ``infer_batch`` process them together."""
    max_restarts: int = 3
    """Ray restarts a dead actor up to this many times (Ray's ``max_restarts``)."""
    max_task_retries: int = 2
    """Ray re-runs a call whose actor died up to this many times (Ray's ``max_task_retries``)."""
    ray_address: str | None = None
    """None: start a new local Ray (never join one already running here); ``auto``: join the cluster of
    ``ray start --head``; or an address."""
    scheduling: str = "default"
    """Where Ray places the actors: ``default`` (Ray's choice: packed where resources are) or ``spread``
    (across the cluster's nodes, Ray's SPREAD strategy)."""

    def __post_init__(self):
        if self.scheduling not in ("default", "spread"):
            raise ValueError(f"tools.scheduling must be 'default' or 'spread', got {self.scheduling!r}")
        if self.executor not in ("ray", "local"):
            raise ValueError(f"tools.executor must be 'ray' or 'local', got {self.executor!r}")
        if self.profile not in ("embedded", "cluster"):
            raise ValueError(f"tools.profile must be 'embedded' or 'cluster', got {self.profile!r}")
        enabled = resolve(self.enabled, self.extra)
        for name in ("settings", "gpu_fraction", "replicas", "batch_size"):
            for tool_id in getattr(self, name):
                if tool_id not in enabled:
                    raise ValueError(f"tools.{name}.{tool_id}: tool is not in tools.enabled {list(enabled)}")
        for name in ("replicas", "batch_size"):
            for tool_id, count in getattr(self, name).items():
                if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                    raise ValueError(f"tools.{name}.{tool_id} must be a positive integer, got {count!r}")
        if self.cache_max_mb is not None and self.cache_max_mb <= 0:
            raise ValueError(f"tools.cache_max_mb must be > 0 (or null: unbounded), got {self.cache_max_mb}")
        if self.timeout_s <= 0 or self.max_seconds <= 0:
            raise ValueError("tools.timeout_s and tools.max_seconds must be > 0")
        if self.max_restarts < 0 or self.max_task_retries < 0:
            raise ValueError("tools.max_restarts and tools.max_task_retries must be >= 0")

    @property
    def tool_ids(self) -> tuple[str, ...]:
        return resolve(self.enabled, self.extra)

"""Settings for ``supervisor run``: defaults, then the config file, then CLI flags.

The config file is ``[tool.supervisor]`` in ``./pyproject.toml``, or the file named by
``--config`` (a ``supervisor.toml`` with the same keys at top level, or a pyproject)::

    children = 8
    grace = 25
    max_memory_per_child = "1GiB"

    [queues.images]          # [tool.supervisor.queues.images] in pyproject.toml
    max_workers = 4
    min_workers = 1
    weight = 3
    max_rate = 20            # jobs started per second
    burst = 5
    prefetch = 1

Keys may use dashes or underscores. Unknown keys are an error, not a silent no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from shared import defaults
from shared.cpus import CpuCount, available_cpus
from shared.memlimit import container_memory
from shared.reservations import check_resources, parse_resources
from shared.units import parse_duration, parse_number, parse_size, parse_whole
from supervisor.pool import PoolSettings
from supervisor.queue_policy import QueuePolicy, validate
from supervisor.tuning import DEFAULT, Tuning


class ConfigError(ValueError):
    """The config file or a flag holds something unusable; the message says where."""


@dataclass
class RunConfig:
    """Everything ``supervisor run`` needs besides the DSN and the handler modules."""

    # Default: the CPUs this process may use (cgroup quota, affinity, host: the least).
    children: int = field(default_factory=lambda: available_cpus().count)
    queues: list[str] | None = None  # None: every queue a loaded handler names
    grace: float = defaults.GRACE
    lease_ttl: float = defaults.LEASE_TTL
    poll_interval: float = defaults.POLL_INTERVAL
    burst: bool = False
    burst_horizon: float = defaults.BURST_HORIZON  # --burst waits for jobs due this soon
    boot_timeout: float = defaults.BOOT_TIMEOUT
    heartbeat_interval: float = defaults.HEARTBEAT_INTERVAL
    heartbeat_timeout: float = defaults.HEARTBEAT_TIMEOUT
    kill_grace: float = defaults.KILL_GRACE
    max_attempts: int = defaults.MAX_ATTEMPTS  # when row and handler say none
    # Crashes in a row with one signature that discard a job as poison; 0: off.
    poison_after: int = defaults.POISON_AFTER
    # The circuit breaker per kind (docs/admission.md): more than breaker_failures crashes
    # within breaker_window seconds pause the kind for breaker_cooldown; 0 failures: off.
    breaker_failures: int = defaults.BREAKER_FAILURES
    breaker_window: float = defaults.BREAKER_WINDOW
    breaker_cooldown: float = defaults.BREAKER_COOLDOWN
    default_timeout: float = defaults.JOB_TIMEOUT  # when row and handler say none; 0: none
    default_soft_timeout: float | None = None  # SoftTimeout when @job sets none; 0: none
    max_jobs_per_child: int | None = None
    max_memory_per_child: int | None = None
    # What the jobs running here may reserve together (docs/admission.md); None: the
    # cgroup's memory.max less the parent's RSS and a margin, or no memory admission.
    memory_budget: int | None = None
    # Seconds a job that does not fit may be overtaken by later, smaller jobs of its queue.
    admission_patience: float = defaults.ADMISSION_PATIENCE
    # Counted resources this supervisor has, by name (``--resources gpu=2``, or a table
    # ``resources = {gpu = 2}``): jobs that declare them are admitted against these.
    resources: dict[str, int] = field(default_factory=dict)
    max_result_bytes: int = defaults.MAX_RESULT_BYTES
    flush_interval: float = 0.02  # longest a finished job's outcome waits to be batched
    prefetch: int | None = None  # jobs held per child for queues without their own; auto
    maintenance_interval: float = defaults.MAINTENANCE_INTERVAL  # beat, rescue, prune
    # Warn when the MVCC horizon is held longer than this, naming the holder; 0: never.
    horizon_warn_after: float = defaults.HORIZON_WARN_AFTER
    retention: float = defaults.RETENTION  # seconds completed/cancelled jobs are kept
    discarded_retention: float = defaults.DISCARDED_RETENTION
    statement_timeout: float = defaults.STATEMENT_TIMEOUT  # the parent's SQL, 0: none
    # Client-side bound on any one wait for the database; past it the connection is
    # abandoned (a server that accepts but never answers is an outage, not a wedge).
    database_deadline: float = defaults.DATABASE_DEADLINE
    listen: bool = True  # False: poll only, no LISTEN (behind a transaction-mode pooler)
    metrics_port: int | None = None  # serve Prometheus text on this port when set
    metrics_host: str = defaults.METRICS_HOST
    metrics_max_kinds: int = defaults.METRICS_MAX_KINDS  # more kinds count as "other"
    # OpenTelemetry spans (the `otel` extra): None ("auto") traces when the --app modules
    # imported opentelemetry, i.e. the application uses it (supervisor/observe/tracing.py).
    otel: bool | None = None
    # Threads per native pool (BLAS, OpenMP, MKL, numexpr) in each child: "auto" (its
    # share of the CPUs, max(1, cpus // children)), a whole number, or "off" (as is).
    native_threads: str | int = "auto"
    # Bytes of what each attempt printed (stdout and stderr, the last ones) kept with
    # the attempt in the database; 0: none.
    output_capture: int = defaults.OUTPUT_CAPTURE
    queue_policies: dict[str, QueuePolicy] = field(default_factory=dict)
    schedules: dict[str, Any] = field(default_factory=dict)  # [schedules.NAME] tables, raw
    # Not settings: the CPUs found at start (for -n's default and native_threads), and
    # whether ``children`` is that default rather than set by flag or file.
    cpus: CpuCount = field(default_factory=available_cpus)
    children_from_cpus: bool = True
    # Not a setting either: the dispatch path's numbers (supervisor.tuning), one record
    # handed to the depth, the planner, the outbox, the run times and the pool.
    tuning: Tuning = DEFAULT

    def children_origin(self) -> str:
        """Where the number of children came from, for the start-up line."""
        if not self.children_from_cpus:
            return "set"
        n = self.cpus.count
        return f"one per CPU: {n} CPU{'s' if n != 1 else ''} from {self.cpus.source}"

    def pool_settings(self) -> PoolSettings:
        """The child pool's part of these settings."""
        return PoolSettings(
            size=self.children, boot_timeout=self.boot_timeout,
            heartbeat_interval=self.heartbeat_interval, heartbeat_timeout=self.heartbeat_timeout,
            kill_grace=self.kill_grace,
            max_jobs_per_child=self.max_jobs_per_child,
            max_memory_per_child=self.max_memory_per_child, max_result_bytes=self.max_result_bytes,
            default_soft_timeout=self.default_soft_timeout,
            native_threads=self.threads_per_child(),
            output_capture=self.output_capture,
            watch_memory=self.memory_budget is not None,
            container=container_memory(),
        )

    def threads_per_child(self) -> int | None:
        """Threads each child's native pools get (None: left as the libraries set)."""
        if self.native_threads == "off":
            return None
        if self.native_threads == "auto":
            return max(1, self.cpus.count // max(1, self.children))
        return int(self.native_threads)

    def policy(self, queue: str) -> QueuePolicy:
        """The scheduling policy of ``queue`` (configured, or the defaults)."""
        configured = self.queue_policies.get(queue)
        if configured is not None:
            return configured
        return QueuePolicy(name=queue, prefetch=self.prefetch)


_SCALAR_KEYS = {f.name for f in fields(RunConfig)} - {"queue_policies", "queues", "burst",
                                                      "schedules", "cpus",
                                                      "children_from_cpus", "tuning"}
_QUEUE_KEYS = {f.name for f in fields(QueuePolicy)} - {"name"}
def _norm(key: str) -> str:
    return key.replace("-", "_")


def _section_from_file(path: Path) -> dict[str, Any]:
    import tomllib  # only when there is a file: not on every start-up's path

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if path.name == "pyproject.toml" or "tool" in data:
        for table in ("queues", "schedules"):
            # ``[queues.x]`` as a supervisor.toml writes it would be silently ignored here.
            if isinstance(data.get(table), dict):
                first = next(iter(data[table]), "NAME")
                raise ConfigError(
                    f"{path}: [{table}.{first}] is outside [tool.supervisor] and would be "
                    f"ignored: write it as [tool.supervisor.{table}.{first}]")
        return data.get("tool", {}).get("supervisor", {})
    return data


def settings_path(config_path: str | None, cwd: Path | None = None) -> Path | None:
    """The file ``load_file_settings`` reads (None: none), for messages that name it."""
    if config_path:
        return Path(config_path)
    pyproject = (cwd or Path.cwd()) / "pyproject.toml"
    return pyproject if pyproject.is_file() else None


def _unknown(raw_key: str, known: set[str], where: str, prefix: str = "") -> ConfigError:
    """The error for a setting nobody reads, naming the file and the closest valid key."""
    import difflib

    close = difflib.get_close_matches(_norm(raw_key), sorted(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"{prefix}unknown setting {raw_key!r} in {where}{hint}")


def load_file_settings(config_path: str | None, cwd: Path | None = None) -> dict[str, Any]:
    """The raw settings table: from ``config_path``, else ``./pyproject.toml``'s
    ``[tool.supervisor]`` when present, else empty."""
    if config_path:
        path = Path(config_path)
        if not path.is_file():
            raise ConfigError(f"config file {config_path} does not exist")
        return _section_from_file(path)
    pyproject = (cwd or Path.cwd()) / "pyproject.toml"
    return _section_from_file(pyproject) if pyproject.is_file() else {}


_SIZE_KEYS = {"max_memory_per_child", "max_result_bytes", "output_capture", "memory_budget"}
# A child's RSS is some tens of MiB before it runs anything: a smaller cap is a size
# written without its unit (``max_memory_per_child = 512``), and would kill every job.
_MIN_SIZES = {"max_memory_per_child": 1 << 20, "memory_budget": 64 << 20}
# Each attempt's output travels in its answer frame and is stored in its row: bounded.
_MAX_SIZES = {"output_capture": 16 << 20}
_NUMBER_KEYS = {"weight", "max_rate"}  # plain numbers; every other float is a duration


def parse_native_threads(value: Any, name: str = "native_threads") -> str | int:
    """``auto``, ``off`` or a whole number of at least 1 (given as such or as text),
    else ``ConfigError``."""
    if value in ("auto", "off"):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and value.isdigit() and int(value) >= 1:
        return int(value)
    raise ConfigError(f"{name} must be auto, off or a whole number of at least 1, "
                      f"not {value!r}")


def _coerce(owner: type, key: str, value: Any, where: str = "") -> Any:
    """``value`` as the type of ``owner``'s field ``key``: whole numbers, numbers,
    durations (``30s``, ``5m``, ``7d``) and sizes (``512MB``), or ``ConfigError`` naming
    the setting and what it expects."""
    kind = {f.name: f.type for f in fields(owner)}[key]
    name = f"{where}{key}"
    if key == "native_threads":
        return parse_native_threads(value, name)
    if key == "resources":
        try:
            counted = (parse_resources(value, name) if isinstance(value, str)
                       else check_resources(value, name))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return counted or {}
    if key in ("prefetch", "otel") and value == "auto":
        return None  # prefetch: measured (engine/depth.py); otel: decided at start
    try:
        if value is None and "None" in kind:
            return None
        if key in _SIZE_KEYS:
            size = parse_size(value, name)
            if key in _MIN_SIZES and size < _MIN_SIZES[key]:
                raise ValueError(
                    f"{name}: {value!r} is {size} bytes, below the {_MIN_SIZES[key] >> 20} "
                    "MiB minimum; give a unit, e.g. \"512MB\" or \"1GiB\"")
            if key in _MAX_SIZES and size > _MAX_SIZES[key]:
                raise ValueError(f"{name}: {value!r} is {size} bytes, over the "
                                 f"{_MAX_SIZES[key] >> 20} MiB maximum")
            return size
        if kind.startswith("int"):
            return parse_whole(value, name)
        if kind.startswith("float"):
            if key in _NUMBER_KEYS:
                return parse_number(value, name)
            return parse_duration(value, name)
        if kind.startswith("str") and not isinstance(value, str):
            raise ValueError(f"{name}: expected text, got {value!r}")
        if kind.startswith("bool") and not isinstance(value, bool):
            raise ValueError(f"{name}: expected true or false, got {value!r}")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return value


def build_config(table: dict[str, Any], overrides: dict[str, Any] | None = None,
                 source: Path | str | None = None) -> RunConfig:
    """A ``RunConfig`` from a settings table (read from file ``source``, named in
    messages) and CLI overrides (None values ignored)."""
    where = f"{source}" if source else "the config file"
    config = RunConfig()
    values: dict[str, Any] = {}
    queue_tables: dict[str, dict[str, Any]] = {}
    for raw_key, value in table.items():
        key = _norm(raw_key)
        if key == "queues" and isinstance(value, dict):
            for name, table_of_queue in value.items():
                if not isinstance(table_of_queue, dict):
                    raise ConfigError(f"queues.{name}: expected a table of settings, got "
                                      f"{table_of_queue!r}")
            queue_tables = {name: dict(v) for name, v in value.items()}
        elif key == "schedules":
            values[key] = value  # checked by the schedules room once handlers are loaded
        elif key in _SCALAR_KEYS:
            values[key] = _coerce(RunConfig, key, value)
        else:
            raise _unknown(raw_key, _SCALAR_KEYS | {"queues", "schedules"}, where)
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = _coerce(RunConfig, key, value) if key in _SCALAR_KEYS else value
    if "children" in values:
        values["children_from_cpus"] = False
    config = replace(config, **values)

    policies = {}
    for name, settings in queue_tables.items():
        clean = {}
        for raw_key, value in settings.items():
            key = _norm(raw_key)
            if key not in _QUEUE_KEYS:
                raise _unknown(raw_key, _QUEUE_KEYS, where, f"queue {name!r}: ")
            clean[key] = _coerce(QueuePolicy, key, value, f"queue {name!r}: ")
        clean.setdefault("prefetch", config.prefetch)
        try:
            policies[name] = validate(QueuePolicy(name=name, **clean))
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
    config.queue_policies = policies
    _check(config)
    return config


def apply_queue_flags(config: RunConfig, flags: list[str]) -> RunConfig:
    """Apply ``--queue-setting images.max_rate=20`` style overrides."""
    for flag in flags:
        name, _, rest = flag.partition(".")
        key, eq, raw = rest.partition("=")
        key = _norm(key)
        if not name or not eq or key not in _QUEUE_KEYS:
            raise ConfigError(f"--queue-setting {flag!r}: expected QUEUE.KEY=VALUE with KEY one "
                              f"of {', '.join(sorted(_QUEUE_KEYS))}")
        value = _coerce(QueuePolicy, key, _number_or_text(raw), f"--queue-setting {name}.")
        try:
            policy = replace(config.policy(name), **{key: value})
            config.queue_policies[name] = validate(policy)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return config


def _number_or_text(raw: str) -> Any:
    """A flag's text as the number it spells, else as text (a duration like ``30s``)."""
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _check(config: RunConfig) -> None:
    if config.children < 1:
        raise ConfigError("children must be at least 1")
    for key in ("grace", "lease_ttl", "poll_interval", "boot_timeout", "heartbeat_interval",
                "heartbeat_timeout", "kill_grace", "flush_interval", "retention",
                "horizon_warn_after"):
        if getattr(config, key) < 0:
            raise ConfigError(f"{key} must not be negative")
    if config.lease_ttl < 1:
        raise ConfigError("lease_ttl must be at least 1 second (leases renew every lease_ttl/3)")
    if config.database_deadline <= 0:
        raise ConfigError("database_deadline must be positive")
    if config.statement_timeout < 0:
        raise ConfigError("statement_timeout must not be negative")
    if config.statement_timeout and config.statement_timeout >= config.database_deadline:
        raise ConfigError(f"statement_timeout ({config.statement_timeout:g} s) must be below "
                          f"database_deadline ({config.database_deadline:g} s): the server's "
                          f"timeout is the error a slow statement should end in, the "
                          f"deadline only catches a server that does not answer at all")
    if config.breaker_failures < 0:
        raise ConfigError("breaker_failures must be 0 (off) or more")
    if config.breaker_window <= 0 or config.breaker_cooldown <= 0:
        raise ConfigError("breaker_window and breaker_cooldown must be positive")
    if config.poison_after < 0:
        raise ConfigError("poison_after must be 0 (off) or more")
    if config.maintenance_interval <= 0:
        raise ConfigError("maintenance_interval must be positive")
    if config.heartbeat_timeout <= config.heartbeat_interval:
        raise ConfigError("heartbeat_timeout must be longer than heartbeat_interval")

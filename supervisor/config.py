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

import os
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from supervisor.engine.allotment import QueuePolicy, validate
from supervisor.pool import PoolSettings


class ConfigError(ValueError):
    """The config file or a flag holds something unusable; the message says where."""


@dataclass
class RunConfig:
    """Everything ``supervisor run`` needs besides the DSN and the handler modules."""

    children: int = field(default_factory=lambda: os.cpu_count() or 1)
    queues: list[str] | None = None  # None: every queue a loaded handler names
    grace: float = 25.0
    lease_ttl: float = 30.0
    poll_interval: float = 1.0
    burst: bool = False
    boot_timeout: float = 30.0
    heartbeat_interval: float = 2.0
    heartbeat_timeout: float = 30.0
    kill_grace: float = 5.0
    default_timeout: float | None = None
    max_jobs_per_child: int | None = None
    max_memory_per_child: int | None = None
    max_result_bytes: int = 1 << 20
    flush_interval: float = 0.02  # longest a finished job's outcome waits to be batched
    # Off: the parent's writes do not wait for the WAL flush. Much faster for short jobs;
    # a PostgreSQL crash (not a lost connection) may then forget the last few hundred ms
    # of claims and completions, and those jobs run again.
    synchronous_commit: bool = True
    prefetch: int = 1  # default for queues that do not set their own
    maintenance_interval: float = 5.0  # heartbeat and leader chores (rescue, prune)
    retention: float = 7 * 24 * 3600.0  # seconds finished jobs are kept before pruning
    metrics_port: int | None = None  # serve Prometheus text on this port when set
    queue_policies: dict[str, QueuePolicy] = field(default_factory=dict)

    def pool_settings(self) -> PoolSettings:
        """The child pool's part of these settings."""
        return PoolSettings(
            size=self.children, boot_timeout=self.boot_timeout,
            heartbeat_interval=self.heartbeat_interval, heartbeat_timeout=self.heartbeat_timeout,
            kill_grace=self.kill_grace,
            max_jobs_per_child=self.max_jobs_per_child,
            max_memory_per_child=self.max_memory_per_child, max_result_bytes=self.max_result_bytes,
        )

    def policy(self, queue: str) -> QueuePolicy:
        """The scheduling policy of ``queue`` (configured, or the defaults)."""
        configured = self.queue_policies.get(queue)
        if configured is not None:
            return configured
        return QueuePolicy(name=queue, prefetch=self.prefetch)


_SCALAR_KEYS = {f.name for f in fields(RunConfig)} - {"queue_policies", "queues", "burst"}
_QUEUE_KEYS = {f.name for f in fields(QueuePolicy)} - {"name"}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
          "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}


def parse_size(value: Any, what: str = "size") -> int:
    """Bytes from an int or a string like ``512MB`` or ``1GiB``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ConfigError(f"{what}: cannot read {value!r} as a size (try 512MB or 1GiB)")
    unit = (match.group(2) or "").lower().rstrip("b")
    return int(float(match.group(1)) * _UNITS[unit])


def _norm(key: str) -> str:
    return key.replace("-", "_")


def _section_from_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if path.name == "pyproject.toml" or "tool" in data:
        return data.get("tool", {}).get("supervisor", {})
    return data


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


def _coerce(key: str, value: Any) -> Any:
    if key in ("max_memory_per_child", "max_result_bytes"):
        return None if value is None else parse_size(value, key)
    return value


def build_config(table: dict[str, Any], overrides: dict[str, Any] | None = None) -> RunConfig:
    """A ``RunConfig`` from a settings table and CLI overrides (None values ignored)."""
    config = RunConfig()
    values: dict[str, Any] = {}
    queue_tables: dict[str, dict[str, Any]] = {}
    for raw_key, value in table.items():
        key = _norm(raw_key)
        if key == "queues" and isinstance(value, dict):
            queue_tables = {name: dict(v) for name, v in value.items()}
        elif key in _SCALAR_KEYS:
            values[key] = _coerce(key, value)
        else:
            raise ConfigError(f"unknown setting {raw_key!r} in the config file")
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = _coerce(key, value) if key in _SCALAR_KEYS else value
    config = replace(config, **values)

    policies = {}
    for name, settings in queue_tables.items():
        clean = {}
        for raw_key, value in settings.items():
            key = _norm(raw_key)
            if key not in _QUEUE_KEYS:
                raise ConfigError(f"queue {name!r}: unknown setting {raw_key!r}")
            clean[key] = value
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
        try:
            value: Any = float(raw) if key in ("weight", "max_rate") else int(raw)
        except ValueError:
            raise ConfigError(f"--queue-setting {flag!r}: {raw!r} is not a number") from None
        try:
            policy = replace(config.policy(name), **{key: value})
            config.queue_policies[name] = validate(policy)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return config


def _check(config: RunConfig) -> None:
    if config.children < 1:
        raise ConfigError("children must be at least 1")
    for key in ("grace", "lease_ttl", "poll_interval", "boot_timeout", "heartbeat_interval",
                "heartbeat_timeout", "kill_grace", "flush_interval", "retention"):
        if getattr(config, key) < 0:
            raise ConfigError(f"{key} must not be negative")
    if config.lease_ttl < 1:
        raise ConfigError("lease_ttl must be at least 1 second (leases renew every lease_ttl/3)")
    if config.maintenance_interval <= 0:
        raise ConfigError("maintenance_interval must be positive")
    if config.heartbeat_timeout <= config.heartbeat_interval:
        raise ConfigError("heartbeat_timeout must be longer than heartbeat_interval")

"""The parameters of the store's statements that are not per-job writes, one frozen
record per statement (as River's ``riverdriver`` has one params struct per query): a
caller names each value, and the statement's placeholders are filled in one place,
``bind``. The per-job writes take the rows of ``supervisor.db.records``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson


@dataclass(slots=True, frozen=True)
class Heartbeat:
    """This supervisor's heartbeat row (``Store.beat``): where it runs, which queues it
    serves, its children and how many are busy, and ``info`` (status details, stored as
    JSON)."""

    host: str
    pid: int
    queues: Sequence[str]
    children: int
    busy: int
    info: dict = field(default_factory=dict)

    def bind(self, owner: str) -> dict[str, Any]:
        """The statement's parameters for the row of supervisor ``owner``."""
        return {"id": owner, "host": self.host, "pid": self.pid, "queues": list(self.queues),
                "children": self.children, "busy": self.busy,
                "info": orjson.dumps(self.info).decode()}


@dataclass(slots=True, frozen=True)
class Prune:
    """One batch of the pruning of finished jobs (``Store.prune``): up to ``batch`` rows
    that ended ``done`` (completed, cancelled) or else discarded (discarded, expired),
    finished more than ``age`` seconds ago and not before ``floor`` (epoch seconds;
    minus infinity: however long ago)."""

    done: bool
    age: float
    batch: int
    floor: float = float("-inf")

    def bind(self) -> dict[str, Any]:
        """The statement's parameters."""
        return {"age": self.age, "batch": self.batch, "floor": self.floor}


@dataclass(slots=True, frozen=True)
class PruneBatches:
    """One batch of the pruning of finished batches (``Store.prune_batches``): up to
    ``batch`` rows older than ``retention`` seconds whose members were all pruned."""

    retention: float
    batch: int

    def bind(self) -> dict[str, Any]:
        """The statement's parameters."""
        return {"retention": self.retention, "batch": self.batch}


class CrashLimits(Protocol):
    """When crashes pause a kind: more than ``failures`` within ``window`` seconds, across
    supervisors, pause it for ``cooldown`` seconds (the breaker's settings are one)."""

    @property
    def window(self) -> float:
        """Seconds in which crashes count together."""

    @property
    def cooldown(self) -> float:
        """Seconds a tripped kind stays paused."""

    @property
    def failures(self) -> int:
        """Crashes within the window a kind may have before it is paused."""


@dataclass(slots=True, frozen=True)
class CrashCount:
    """Crashes to record for the circuit breaker (``Store.record_crashes``): one per entry
    of ``kinds``, counted against ``limits``."""

    kinds: Sequence[str]
    limits: CrashLimits

    def bind(self) -> dict[str, Any]:
        """The statement's parameters."""
        limits = self.limits
        return {"kinds": list(self.kinds), "window": limits.window,
                "cooldown": limits.cooldown, "failures": limits.failures}

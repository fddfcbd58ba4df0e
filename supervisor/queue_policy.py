"""One queue's scheduling settings (``[tool.supervisor.queues.NAME]`` and
``--queue-setting``), and their check. Settings only: the engine's allotment turns them
into shares of the pool, and the config reads them without reaching into the engine."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class QueuePolicy:
    """Scheduling settings of one queue, from the config file and CLI flags."""

    name: str
    max_workers: int | None = None  # None: no cap beyond the pool size
    min_workers: int = 0
    weight: float = 1.0
    max_rate: float | None = None  # jobs started per second, None: unlimited
    burst: int | None = None  # token bucket size for max_rate (default: 1)
    prefetch: int | None = None  # jobs held per allotted child; None: "auto", measured
    # Seconds of waiting that make a job one priority step more urgent; 0: strict
    # priorities. Off by default: an ordering the user asked for is kept exactly, and
    # the claim stays one ordered index scan (aging adds a probe per priority level).
    aging: float = 0.0
    # "batch": waiting jobs are served round-robin by batch (each batch with work, and
    # the jobs of no batch, one job each in turn at equal priority), so a second batch
    # does not wait behind the first; None: one order for the whole queue.
    fair: str | None = None

    def cap(self, total: int) -> int:
        """The most children this queue may hold in a pool of ``total``."""
        return total if self.max_workers is None else min(self.max_workers, total)


# The aged claim computes now() - aging seconds: much past this, PostgreSQL's interval
# and timestamp arithmetic overflows and every claim of the queue would fail, so a
# larger setting is refused when the config is read.
MAX_AGING = 100 * 365 * 86400.0  # a century: aging that large never changes an order


# What a queue may be fair by (``fair = "batch"``); None: not fair.
FAIR_BY = (None, "batch")


def _number(value: object, whole: bool = False) -> bool:
    kinds = int if whole else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)


def validate(policy: QueuePolicy) -> QueuePolicy:
    """Raise ``ValueError`` naming the queue and setting when a policy is unusable."""
    checks = [  # (setting, value, whole number?, allowed, what it must be)
        ("max_workers", policy.max_workers, True, lambda v: v >= 0, ">= 0"),
        ("min_workers", policy.min_workers, True, lambda v: v >= 0, ">= 0"),
        ("weight", policy.weight, False, lambda v: v > 0, "> 0"),
        ("max_rate", policy.max_rate, False, lambda v: v > 0, "> 0"),
        ("burst", policy.burst, True, lambda v: v >= 1, ">= 1"),
        ("prefetch", policy.prefetch, True, lambda v: v >= 1, ">= 1"),
        ("aging", policy.aging, False, lambda v: 0 <= v <= MAX_AGING,
         f">= 0 seconds (0: off) and at most {MAX_AGING:.0f} (a century)"),
    ]
    problems = []
    if policy.fair not in FAIR_BY:
        problems.append(f"fair must be one of {', '.join(map(repr, FAIR_BY[1:]))} (or left "
                        f"out), not {policy.fair!r}")
    elif policy.fair is not None and policy.aging:
        problems.append("fair and aging cannot be combined yet: choose one")
    for name, value, whole, allowed, rule in checks:
        if value is None and name in ("max_workers", "max_rate", "burst", "prefetch"):
            continue
        if not _number(value, whole):
            problems.append(f"{name} must be a {'whole ' if whole else ''}number {rule}")
        elif not allowed(value):
            problems.append(f"{name} must be {rule}")
    if problems:
        raise ValueError(f"queue {policy.name!r}: " + "; ".join(problems))
    return policy

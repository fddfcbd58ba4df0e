"""Capacity: how many of the N children each queue may use right now.

Every queue has ``max_workers`` (a cap), ``min_workers`` (a guarantee) and ``weight``.
Among the queues that have demand, each first gets its minimum; what is left of the N
children (the overflow pool) is shared by weight, never above a queue's cap. Queues
without demand get nothing, so the split is work-conserving: an idle queue's minimum is
lent to the busy ones and comes back as their jobs finish (running jobs are never
preempted). Pure arithmetic, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    prefetch: int = 1  # jobs claimed per allotted child: >1 lets short jobs pipeline

    def cap(self, total: int) -> int:
        """The most children this queue may hold in a pool of ``total``."""
        return total if self.max_workers is None else min(self.max_workers, total)


def allot(policies: Mapping[str, QueuePolicy], demand: set[str], total: int) -> dict[str, int]:
    """Children allotted to each queue with demand; the others get 0.

    Minimums first (in name order if they oversubscribe the pool), then the rest by
    weight with water-filling over the caps, whole children by largest remainder.
    """
    targets = {name: 0 for name in policies}
    hungry = sorted(name for name in demand if name in policies and policies[name].cap(total) > 0)
    free = total
    for name in hungry:
        grant = min(policies[name].min_workers, policies[name].cap(total), free)
        targets[name] = grant
        free -= grant

    while free > 0:
        open_queues = [n for n in hungry if targets[n] < policies[n].cap(total)]
        if not open_queues:
            break
        weight_sum = sum(policies[n].weight for n in open_queues)
        shares = {n: free * policies[n].weight / weight_sum for n in open_queues}
        whole = {n: min(int(shares[n]), policies[n].cap(total) - targets[n]) for n in open_queues}
        given = sum(whole.values())
        if given == 0:
            # Less than one child per queue is left: hand them out by largest share.
            for n in sorted(open_queues, key=lambda q: (-shares[q], q))[:free]:
                targets[n] += 1
            break
        for n, add in whole.items():
            targets[n] += add
        free -= given
    return targets


def claim_allowance(policy: QueuePolicy, target: int, outstanding: int) -> int:
    """How many jobs a queue may claim now: its allotted children times its prefetch,
    less the jobs it already holds (running or waiting for a child)."""
    return max(target * max(policy.prefetch, 1) - outstanding, 0)


def pick_queue(
    waiting: Mapping[str, int],
    running: Mapping[str, int],
    targets: Mapping[str, int],
    caps: Mapping[str, int],
) -> str | None:
    """Which queue's waiting job goes to the next idle child.

    The queue furthest below its allotment goes first (ties by name), so saturated
    queues converge on their weights. A queue at its allotment may still take an idle
    child nobody else is waiting for (work-conserving), but never beyond its cap.
    """
    best: tuple[float, str] | None = None
    for name, count in waiting.items():
        if count <= 0 or running.get(name, 0) >= caps.get(name, 0):
            continue
        target = targets.get(name, 0)
        load = running.get(name, 0) / target if target > 0 else float("inf")
        if best is None or (load, name) < best:
            best = (load, name)
    return None if best is None else best[1]


def validate(policy: QueuePolicy) -> QueuePolicy:
    """Raise ``ValueError`` naming the queue and setting when a policy is unusable."""
    problems = []
    if policy.max_workers is not None and policy.max_workers < 0:
        problems.append("max_workers must be >= 0")
    if policy.min_workers < 0:
        problems.append("min_workers must be >= 0")
    if policy.weight <= 0:
        problems.append("weight must be > 0")
    if policy.max_rate is not None and policy.max_rate <= 0:
        problems.append("max_rate must be > 0")
    if policy.burst is not None and policy.burst < 1:
        problems.append("burst must be >= 1")
    if policy.prefetch < 1:
        problems.append("prefetch must be >= 1")
    if problems:
        raise ValueError(f"queue {policy.name!r}: " + "; ".join(problems))
    return policy

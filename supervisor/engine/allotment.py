"""Capacity: how many of the N children each queue may use, now and over time.

Every queue has ``max_workers`` (a cap), ``min_workers`` (a guarantee) and ``weight``.
Among the queues that have demand, each first gets its minimum; what is left of the N
children (the overflow pool) is shared by weight among all of them, minimum or not,
never above a queue's cap (``shares``). A share is a number of children and may be a
fraction: a queue whose share is 0.6 child runs on one child 60% of the time. The
``Deficits`` book keeps, per queue, the child-seconds it was owed minus those it used;
whole children are handed out by rounding the shares down and giving the children left
over to the queues owed the most (``apportion``), so every queue's time average meets its
share within a few job lengths, however small its weight. Queues without demand get
nothing: the split is work-conserving, and running jobs are never preempted.
Pure arithmetic, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Set

from supervisor.queue_policy import QueuePolicy
from supervisor.tuning import DEFAULT, Tuning

_EPS = 1e-9  # a float's error, not a rule


def shares(policies: Mapping[str, QueuePolicy], demand: Set[str], total: int) -> dict[str, float]:
    """Each queue's share of the pool, in children (fractions allowed); 0 without demand.

    Minimums first (scaled down alike when they add up to more than the pool), then the
    overflow by weight over every queue with demand, water-filled over the caps: a
    capped queue's unused part goes to the others by their weights.
    """
    result = {name: 0.0 for name in policies}
    hungry = sorted(n for n in demand if n in policies and policies[n].cap(total) > 0)
    if not hungry or total <= 0:
        return result
    caps = {n: float(policies[n].cap(total)) for n in hungry}
    mins = {n: min(float(policies[n].min_workers), caps[n]) for n in hungry}
    scale = min(1.0, total / sum(mins.values())) if sum(mins.values()) > 0 else 1.0
    for n in hungry:
        result[n] = mins[n] * scale
    free = total - sum(result[n] for n in hungry)
    open_queues = [n for n in hungry if result[n] < caps[n] - _EPS]
    while free > _EPS and open_queues:
        level = free / sum(policies[n].weight for n in open_queues)
        full = [n for n in open_queues if result[n] + policies[n].weight * level >= caps[n] - _EPS]
        if not full:
            for n in open_queues:
                result[n] += policies[n].weight * level
            break
        # These reach their caps at this level; the level only rises for the rest.
        for n in full:
            free -= caps[n] - result[n]
            result[n] = caps[n]
        open_queues = [n for n in open_queues if n not in full]
    return result


def apportion(share: Mapping[str, float], owed: Mapping[str, float]) -> dict[str, int]:
    """Whole children from fractional shares: each queue's share rounded down, and the
    children left over to the queues owed the most (then the largest fraction, then
    name). The total is the shares' total, rounded."""
    targets = {n: math.floor(s + _EPS) for n, s in share.items()}
    spare = round(sum(share.values())) - sum(targets.values())
    fractional = [n for n, s in share.items() if s - targets[n] > _EPS]
    fractional.sort(key=lambda n: (-owed.get(n, 0.0), targets[n] - share[n], n))
    for n in fractional[:max(spare, 0)]:
        targets[n] += 1
    return targets


def allot(policies: Mapping[str, QueuePolicy], demand: Set[str], total: int,
          owed: Mapping[str, float] | None = None) -> dict[str, int]:
    """Children allotted to each queue with demand right now; the others get 0.

    ``owed`` (from ``Deficits``) decides who gets the children that fractional shares
    leave over; without it, the largest fractions do (a snapshot, fair only on average
    if the caller rotates them).
    """
    return apportion(shares(policies, demand, total), owed or {})


class Deficits:
    """Per queue with demand, child-seconds owed: its share integrated over time minus
    the children it held. Positive means the queue got less than its share so far.

    Entitlements are scaled to the children the queues with demand actually held, so the
    book stays zero-sum (children idle for lack of claimed work, or held by a queue
    finishing its last jobs, are nobody's debt). A queue that loses its demand forgets
    its balance, as in deficit round robin: idle time is not banked. How much a queue
    may be owed (or owe) is ``tuning.horizon_jobs`` job lengths: enough memory to give a
    queue with a tiny share its turn, bounded so a queue that could not use its share
    for a while (rate limit, unhandled kinds) does not then take the pool for long.
    """

    def __init__(self, now: float, tuning: Tuning = DEFAULT) -> None:
        self.tuning = tuning
        self.owed: dict[str, float] = {}
        self._at = now
        self._share: dict[str, float] = {}
        self._source: Mapping[str, float] | None = None
        self._running: dict[str, int] = {}
        self._busy = 0.0  # decayed child-seconds used, and starts: the mean job length
        self._starts = 0.0

    def advance(self, now: float, share: Mapping[str, float], running: Mapping[str, int]) -> None:
        """Account the time since the last call at the last shares and running counts,
        then remember these ones (queues with a positive share are the ones with demand)."""
        dt = now - self._at
        if dt > 0:
            self._account(dt)
            self._at = now
        if share is not self._source:  # the planner hands the same dict until it changes
            self._source = share
            self._share = {q: s for q, s in share.items() if s > _EPS}
            for q in [q for q in self.owed if q not in self._share]:
                del self.owed[q]
        self._running = dict(running)

    def started(self, count: int = 1) -> None:
        """A job (or ``count``) went to a child: feeds the mean job length estimate."""
        self._starts += count

    def ranks(self) -> dict[str, float]:
        """The balances rounded to a sixteenth of the horizon, for ordering queues: a
        queue is not preferred for being owed a millisecond more, which would swap the
        spare child back and forth between claims."""
        step = self.horizon() / self.tuning.rank_steps
        return {q: round(v / step) for q, v in self.owed.items()}

    def horizon(self) -> float:
        """The largest balance kept, in child-seconds: a few mean job lengths."""
        length = self._busy / self._starts if self._starts >= 1 else 0.0
        return max(self.tuning.min_horizon, self.tuning.horizon_jobs * length)

    def _account(self, dt: float) -> None:
        held = sum(self._running.get(q, 0) for q in self._share)
        entitled = sum(self._share.values())
        scale = held / entitled if entitled > 0 else 0.0
        bound = self.horizon()
        for q, s in self._share.items():
            balance = self.owed.get(q, 0.0) + (s * scale - self._running.get(q, 0)) * dt
            self.owed[q] = min(max(balance, -bound), bound)
        decay = math.exp2(-dt / self.tuning.length_half_life)
        self._busy = self._busy * decay + sum(self._running.values()) * dt
        self._starts *= decay


def claim_allowance(depth: int, target: int, outstanding: int) -> int:
    """How many jobs a queue may claim now: its allotted children times its prefetch
    depth, less the jobs it already holds (running or waiting for a child)."""
    return max(target * max(depth, 1) - outstanding, 0)


def pick_queue(
    waiting: Mapping[str, int],
    running: Mapping[str, int],
    targets: Mapping[str, int],
    caps: Mapping[str, int],
    owed: Mapping[str, float] | None = None,
    coming: Set[str] = frozenset(),
) -> str | None:
    """Which queue's waiting job goes to the next idle child (None: keep it idle).

    Queues below their allotment first, the one owed the most (then the least loaded,
    then by name) before the others. ``coming`` are queues below their allotment whose
    claim is on its way: if one of them is first, the child waits for its jobs. Else a
    queue at its allotment may take an idle child nobody below theirs wants
    (work-conserving), never beyond its cap; the child-seconds it takes that way count
    against it in ``owed``.
    """
    owed = owed or {}
    best: tuple | None = None
    chosen: str | None = None  # the best key's queue, if it has jobs waiting
    for name in set(waiting).union(coming):
        held = running.get(name, 0)
        if held >= caps.get(name, 0):
            continue
        target = targets.get(name, 0)
        has_jobs = waiting.get(name, 0) > 0
        if not has_jobs and (name not in coming or held >= target):
            continue
        if held >= target and coming:
            continue  # no lending while a queue owed children is about to claim
        load = held / target if target > 0 else float("inf")
        key = (held >= target, -owed.get(name, 0.0), load, name, has_jobs)
        if best is None or key < best:
            best = key
            chosen = name if has_jobs else None
    return chosen

"""Which queues to claim from, how many, and whose waiting job goes to a free child.

The scheduler keeps per-queue demand (does this queue probably have work?) and rate
limit buckets, and turns them with the allotment arithmetic of ``overflow`` into claim
sizes. Permits are taken before a claim: a queue never claims more than its allotted
children can start (times its prefetch), nor more than its token bucket allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from supervisor.engine.allotment import allot, claim_allowance, pick_queue
from supervisor.engine.ratelimit import TokenBucket

if TYPE_CHECKING:  # config imports the allotment; at run time nothing here needs it
    from supervisor.config import RunConfig


class Scheduler:
    """Claim sizes and dispatch order for the queues one supervisor serves."""

    def __init__(self, config: RunConfig, queues: Sequence[str], now: float) -> None:
        self.config = config
        self.queues = list(queues)
        self.policies = {q: config.policy(q) for q in self.queues}
        # Queues known to hold work: set from the database's answer on each poll, added
        # to by NOTIFY, and cleared per queue when a claim comes back short.
        self.demand: set[str] = set()
        self._targets_key: tuple[int, frozenset[str]] | None = None
        self._targets: dict[str, int] = {}
        self.buckets = {
            q: TokenBucket(p.max_rate, p.burst, now)
            for q, p in self.policies.items()
            if p.max_rate is not None
        }

    def wake(self, queues: Iterable[str]) -> None:
        """Queues that got work (named by NOTIFY)."""
        self.demand.update(q for q in queues if q in self.policies)

    def observed(self, with_work: set[str]) -> None:
        """The database's answer to which queues hold due work now (a poll)."""
        self.demand = {q for q in with_work if q in self.policies}

    def targets(self, pool_size: int) -> dict[str, int]:
        """Children allotted to each queue now (recomputed only when demand or the pool
        size changed: the loop asks every turn)."""
        key = (pool_size, frozenset(self.demand))
        if key != self._targets_key:
            self._targets_key = key
            self._targets = allot(self.policies, self.demand, pool_size)
        return self._targets

    def caps(self, pool_size: int) -> dict[str, int]:
        """The most children each queue may hold."""
        return {q: p.cap(pool_size) for q, p in self.policies.items()}

    def plan_claims(
        self, now: float, pool_size: int, outstanding: Mapping[str, int],
        waiting: Mapping[str, int], eager: bool = False,
    ) -> list[tuple[str, int]]:
        """``(queue, n)`` claims to make now; rate-limit tokens for them are taken.

        A queue that still has jobs waiting for a child only claims once it may take at
        least half its window, so short jobs are claimed in batches, not one by one;
        ``eager`` (outcomes are waiting to be written anyway) lifts that rule.
        """
        targets = self.targets(pool_size)
        plans = []
        for queue in self.queues:
            if queue not in self.demand:
                continue
            policy = self.policies[queue]
            allowance = claim_allowance(policy, targets[queue], outstanding.get(queue, 0))
            if allowance <= 0:
                continue
            window = targets[queue] * policy.prefetch
            if not eager and waiting.get(queue, 0) > 0 and allowance * 2 < window:
                continue
            bucket = self.buckets.get(queue)
            if bucket is not None:
                allowance = bucket.take(allowance, now)
                if allowance <= 0:
                    continue
            plans.append((queue, allowance))
        return plans

    def claimed(self, queue: str, asked: int, got: int) -> None:
        """Record a claim's result: refund unused tokens; a short claim means the queue is
        empty for now (until a NOTIFY or the next poll)."""
        if got < asked:
            self.demand.discard(queue)
            bucket = self.buckets.get(queue)
            if bucket is not None:
                bucket.refund(asked - got)

    def unplanned(self, queue: str, tokens: int) -> None:
        """A planned claim was not made after all: give its rate-limit tokens back."""
        bucket = self.buckets.get(queue)
        if bucket is not None:
            bucket.refund(tokens)

    def next_queue(
        self, pool_size: int, waiting: Mapping[str, int], running: Mapping[str, int]
    ) -> str | None:
        """The queue whose waiting job should go to the next idle child."""
        return pick_queue(waiting, running, self.targets(pool_size), self.caps(pool_size))

    def next_token_at(self, now: float) -> float | None:
        """When a rate-limited queue with demand gets its next token (for the loop's
        timeout), or None."""
        times = [b.next_token_at(now) for q, b in self.buckets.items() if q in self.demand]
        due = [t for t in times if t > now]
        return min(due) if due else None

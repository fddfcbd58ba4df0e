"""Which queues to claim from, how many, and whose waiting job goes to a free child.

The scheduler keeps per-queue demand (does this queue probably have work?), rate limit
buckets and the fair-share book (``allotment.Deficits``), and turns them with the
allotment arithmetic into claim sizes and a dispatch order. Permits are taken before a
claim: a queue never claims more than its allotted children can start (times its
prefetch), nor more than its token bucket allows. The allotment moves with time: where
shares are fractions of a child, the spare children go to the queues owed the most, so
a queue whose turn it is finds room to claim, and its claimed jobs go first.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from supervisor.engine.allotment import Deficits, apportion, claim_allowance, pick_queue, shares
from supervisor.engine.depth import PrefetchDepth
from supervisor.engine.limits import GlobalLimits
from supervisor.engine.ratelimit import TokenBucket
from supervisor.pool import RunTimes

if TYPE_CHECKING:  # config imports the allotment; at run time nothing here needs it
    from supervisor.config import RunConfig
    from supervisor.db import Store
    from supervisor.observe import SupervisorMetrics


class Scheduler:
    """Claim sizes and dispatch order for the queues one supervisor serves."""

    def __init__(self, config: RunConfig, queues: Sequence[str], now: float,
                 clock: Callable[[], float] = time.monotonic,
                 metrics: SupervisorMetrics | None = None, owner: str = "",
                 run_times: RunTimes | None = None) -> None:
        self.config = config
        self.metrics = metrics  # records rate-limited plans and refunded permits
        self.clock = clock
        self.queues = list(queues)
        self.policies = {q: config.policy(q) for q in self.queues}
        # Queues known to hold work: set from the database's answer on each poll, added
        # to by NOTIFY, and cleared per queue when a claim comes back short.
        self.demand: set[str] = set()
        self.tuning = tuning = config.tuning  # the dispatch path's numbers
        self.deficits = Deficits(now, tuning)
        # Jobs held per child where prefetch is "auto", from the pool's run times.
        self.depth = PrefetchDepth(run_times if run_times is not None else RunTimes(tuning),
                                   tuning)
        self._short_since: dict[str, float] = {}  # queues below their allotment, since
        self._claiming: set[str] = set()  # planned claims not yet answered
        # Queues woken while their claim was out: that claim's snapshot may predate the
        # work, so its coming back short must not put the queue to sleep.
        self._woken_while_claiming: set[str] = set()
        # Queues with a per-key limit whose last claim came back short: their keys with
        # work may all be at the limit, so a job of theirs ending may free one.
        self._keys_full: set[str] = set()
        # Fair queues (``fair = "batch"``) woken by a NOTIFY: their next claim takes a
        # job even when their pipes are full, so a batch that just arrived is claimed
        # now (the claim serves batches held here last) and the dispatcher can make way
        # for its first job, rather than after every job already queued (issue 42).
        self._scouting: set[str] = set()
        # Of those, the ones whose NOTIFY named a batch this supervisor holds no job of:
        # they claim now even when their room is below the claim-when-free mark, which
        # would otherwise hold a newcomer's claim back until more children end (issue 42).
        self._newcomers: set[str] = set()
        # Queues whose last claim came back with every job it asked for: they surely
        # hold more work, which a poll need not read again (``known_busy``).
        self._full: set[str] = set()
        self._shares_key: tuple[int, frozenset[str]] | None = None
        self._shares: dict[str, float] = {}
        self.buckets = {
            q: TokenBucket(p.max_rate, p.burst, now)
            for q, p in self.policies.items()
            if p.max_rate is not None
        }
        # Limits set with `supervisor queues limit`, held across every supervisor.
        self.limits = GlobalLimits(owner, self.queues, config.lease_ttl, now)

    def wake(self, queues: Iterable[str], batches: Mapping[str, Collection[int]] | None = None,
             held: Callable[[str], Collection[int]] | None = None) -> None:
        """Queues that got work (named by NOTIFY). ``batches``: per queue, the batches
        key notices made members available in; ``held(queue)``: the batches this
        supervisor holds jobs of. A fair queue told of a batch it holds nothing of has a
        newcomer to claim at once."""
        for queue in queues:
            if queue in self.policies:
                self.demand.add(queue)
                if self.fair(queue):
                    self._scouting.add(queue)
                if queue in self._claiming:
                    self._woken_while_claiming.add(queue)
        for queue, told in (batches or {}).items():
            if told and self.fair(queue):
                known = set(held(queue)) if held is not None else set()
                if not known.issuperset(told):
                    self._newcomers.add(queue)

    def observed(self, with_work: set[str]) -> None:
        """The database's answer to which queues hold due work now (a poll)."""
        self.demand = {q for q in with_work if q in self.policies}

    def shares(self, pool_size: int, waiting: Mapping[str, int] | None = None,
               now: float | None = None) -> dict[str, float]:
        """Each queue's share of the pool in children, fractions allowed. Shared among
        the queues with demand (a queue holding claimed jobs keeps its demand until they
        have started), less those a rate limit holds back for now: their share goes to
        the others until their next token."""
        now = self.clock() if now is None else now
        waiting = waiting or {}
        demand = self.demand.union(q for q, n in waiting.items() if n > 0 and q in self.policies)
        throttled = set()
        if self.buckets or self.limits.buckets:
            throttled = {q for q in demand
                         if not waiting.get(q) and q not in self._claiming
                         and any(b.available(now) < 1 for b in self._buckets(q, now))}
        key = (pool_size, frozenset(demand - throttled))
        if key != self._shares_key:  # the loop asks every turn; demand rarely changes
            self._shares_key = key
            self._shares = shares(self.policies, key[1], pool_size)
        return self._shares

    def targets(self, pool_size: int, waiting: Mapping[str, int] | None = None,
                now: float | None = None) -> dict[str, int]:
        """Children allotted to each queue now: the shares rounded, the spare children to
        the queues owed the most."""
        return apportion(self.shares(pool_size, waiting, now), self.deficits.ranks())

    def advance(self, now: float, pool_size: int, running: Mapping[str, int],
                waiting: Mapping[str, int] | None = None) -> dict[str, int]:
        """Bring the fair-share book up to ``now`` (children held per queue: ``running``);
        returns the allotment it gives (``targets``)."""
        share = self.shares(pool_size, waiting, now)
        self.deficits.advance(now, share, running)
        return apportion(share, self.deficits.ranks())

    def caps(self, pool_size: int) -> dict[str, int]:
        """The most children each queue may hold."""
        caps = {q: p.cap(pool_size) for q, p in self.policies.items()}
        if self.limits.settings:
            now = self.clock()
            for queue in caps:
                cap = self.limits.start_cap(queue, now)
                if cap is not None:
                    caps[queue] = min(caps[queue], cap)
        return caps

    def limited(self) -> bool:
        """Whether any served queue has a global limit (``supervisor queues limit``)."""
        return bool(self.limits.settings)

    def start_cap(self, queue: str) -> int | None:
        """How many children may run ``queue`` here now under its global max_running
        (None: no such limit)."""
        if not self.limits.settings:
            return None
        return self.limits.start_cap(queue, self.clock())

    def per_key(self, queue: str) -> int | None:
        """``queue``'s global per-concurrency-key limit (None: none): its claims must
        count running jobs per key."""
        return self.limits.per_key(queue)

    def refresh_limits(self, store: Store, now: float, pool_size: int,
                       running: Mapping[str, int], waiting: Mapping[str, int],
                       notified: bool = False) -> None:
        """Read the global limits and renew this supervisor's slices of them (blocking
        statements of ``store``). ``notified``: changes are told by NOTIFY
        (``GlobalLimits.refresh``)."""
        def wants(queue: str) -> tuple[int, int, bool]:
            active = queue in self.demand or waiting.get(queue, 0) > 0
            held = running.get(queue, 0)
            policy = self.policies.get(queue)
            cap = policy.cap(pool_size) if policy is not None else 0
            return (cap if active else held), held, active

        self.limits.refresh(store, now, wants, notified)
        self._shares_key = None  # a slice may have come or gone: shares again

    def plan_claims(
        self, now: float, pool_size: int, outstanding: Mapping[str, int],
        waiting: Mapping[str, int], eager: bool = False,
    ) -> list[tuple[str, int]]:
        """``(queue, n)`` claims to make now; rate-limit tokens for them are taken.

        A queue that still has jobs waiting for a child only claims once it may take at
        least half its window, so short jobs are claimed in batches, not one by one;
        ``eager`` (outcomes are waiting to be written anyway) lifts that rule. A fair
        queue woken by a NOTIFY with no room claims one job anyway (a newcomer batch's
        first, which the dispatcher then puts first), up to one per child beyond its
        window; one told of a batch it holds no job of (``wake``'s ``batches`` and
        ``held``) claims what room it has at once, however little.
        """
        running = {q: n - waiting.get(q, 0) for q, n in outstanding.items()}
        targets = self.advance(now, pool_size, running, waiting)
        plans = []
        for queue in self.queues:
            if queue not in self.demand:
                continue
            policy = self.policies[queue]
            depth = self.depth.depth(queue, policy.prefetch)
            allowance = claim_allowance(depth, targets[queue], outstanding.get(queue, 0))
            # Not for a queue with no child to run it (all stuck on long jobs): its
            # claim would go straight back, and the release's NOTIFY would wake it again.
            # At most one job per child beyond the window: a producer's stream of NOTIFYs
            # must not pile claimed jobs up here.
            # With room, only for a newcomer: otherwise a queue with room claims by the
            # usual rules, and a scout on every NOTIFY would break its claims into small
            # ones (each fair claim reads every waiting batch's head: 3.5x the index
            # entries per job at 500 jobs/s). A newcomer is claimed with whatever room
            # there is: waiting for half a window held its first job back 1-2 job lengths.
            newcomer = queue in self._newcomers and queue in self._scouting
            scout = ((allowance <= 0 or newcomer) and queue in self._scouting
                     and targets[queue] > 0
                     and outstanding.get(queue, 0) < (depth + 1) * targets[queue])
            self._scouting.discard(queue)
            self._newcomers.discard(queue)
            if scout:
                allowance = max(allowance, 1)
            elif allowance <= 0:
                continue
            window = targets[queue] * depth
            if (not eager and not scout and waiting.get(queue, 0) > 0
                    and allowance < window * self.tuning.claim_when_free):
                continue
            if self.limits.settings:
                room = self.limits.claim_room(queue, now, targets[queue], depth,
                                              outstanding.get(queue, 0))
                if room is not None:
                    allowance = min(allowance, room)
                    if allowance <= 0:
                        continue
            buckets = self._buckets(queue, now) if self.buckets or self.limits.buckets else ()
            if buckets:
                wanted = allowance
                allowance = self._take_tokens(buckets, allowance, now)
                if allowance < wanted and self.metrics is not None:
                    self.metrics.rate_limited(queue)
                if allowance <= 0:
                    continue
            plans.append((queue, allowance))
        self._claiming.update(queue for queue, _ in plans)
        return plans

    def claiming(self, queue: str) -> bool:
        """Whether a claim planned for ``queue`` is not answered yet."""
        return queue in self._claiming

    def claimed(self, queue: str, asked: int, got: int) -> None:
        """Record a claim's result: refund unused tokens; a short claim means the queue is
        empty for now (until a NOTIFY or the next poll), unless a wake came while it was
        out (its snapshot may predate the work that woke it)."""
        self._claiming.discard(queue)
        woken = queue in self._woken_while_claiming
        self._woken_while_claiming.discard(queue)
        if got >= asked > 0:
            self._full.add(queue)
        else:
            self._full.discard(queue)
        if got < asked:
            self._refund(queue, asked - got)
            if woken:
                return
            self.demand.discard(queue)
            if self.limits.per_key(queue) is not None:
                self._keys_full.add(queue)

    def jobs_ended(self, queues: Iterable[str]) -> None:
        """Jobs of ``queues`` ended here: a keyed queue whose claim came back short
        claims again, since the ended job may have freed its key (other supervisors
        learn it from the NOTIFY the schema sends when a keyed job stops running)."""
        for queue in queues:
            if queue in self._keys_full:
                self._keys_full.discard(queue)
                self.demand.add(queue)
            elif queue in self._claiming and self.limits.per_key(queue) is not None:
                self._woken_while_claiming.add(queue)

    def unplanned(self, queue: str, tokens: int) -> None:
        """A planned claim was not made after all: give its rate-limit tokens back."""
        self._claiming.discard(queue)
        self._woken_while_claiming.discard(queue)
        self._refund(queue, tokens)

    def _buckets(self, queue: str, now: float) -> list[TokenBucket]:
        """The token buckets a claim of ``queue`` takes from: this supervisor's own
        max_rate (config) and its slice of the queue's global one."""
        found = []
        local = self.buckets.get(queue)
        if local is not None:
            found.append(local)
        if self.limits.buckets:
            shared = self.limits.bucket(queue, now)
            if shared is not None:
                found.append(shared)
        return found

    @staticmethod
    def _take_tokens(buckets: list[TokenBucket], wanted: int, now: float) -> int:
        granted = wanted
        taken: list[TokenBucket] = []
        for bucket in buckets:
            got = bucket.take(granted, now)
            for earlier in taken:  # the tighter bucket decides; the others get it back
                earlier.refund(granted - got)
            granted = got
            taken.append(bucket)
        return granted

    def _refund(self, queue: str, tokens: int) -> None:
        if not (self.buckets or self.limits.buckets):
            return
        buckets = self._buckets(queue, self.clock())
        for bucket in buckets:
            bucket.refund(tokens)
        if buckets and self.metrics is not None:
            self.metrics.tokens_refunded(queue, tokens)

    def next_queue(
        self, pool_size: int, waiting: Mapping[str, int], running: Mapping[str, int],
        now: float | None = None,
    ) -> str | None:
        """The queue whose waiting job should go to the next idle child (the caller gives
        it one: that start is counted for the mean job length)."""
        now = self.clock() if now is None else now
        targets = self.advance(now, pool_size, running, waiting)
        coming = self._claims_coming(now, targets, waiting, running)
        queue = pick_queue(waiting, running, targets, self.caps(pool_size),
                           self.deficits.ranks(), coming)
        if queue is not None:
            self.deficits.started()
        return queue

    def _claims_coming(self, now: float, targets: Mapping[str, int],
                       waiting: Mapping[str, int], running: Mapping[str, int]) -> set[str]:
        """Queues below their allotment, holding no job, about to claim: a free child may
        wait for their jobs (for at most ``tuning.claim_hold``: the claim's round
        trip, normally a few ms; it bounds the wait when that claim cannot come) rather
        than go to a queue owed less. Otherwise a queue of short jobs, which frees its
        child before its next claim is back, would lose that child at every job."""
        coming = set()
        short_since = {}
        for queue in self.demand:
            short = waiting.get(queue, 0) == 0 and targets.get(queue, 0) > running.get(queue, 0)
            if short and (queue in self._claiming
                          or all(b.available(now) for b in self._buckets(queue, now))):
                since = short_since[queue] = self._short_since.get(queue, now)
                if now - since <= self.tuning.claim_hold:
                    coming.add(queue)
        self._short_since = short_since
        return coming

    def known_busy(self, queue: str) -> bool:
        """Whether ``queue``'s last claim took every job it asked for (more surely
        waits) and it still has demand: a poll may take its word instead of reading."""
        return queue in self._full and queue in self.demand

    def fair(self, queue: str) -> bool:
        """Whether ``queue``'s claims serve its batches round-robin (``fair = "batch"``)."""
        policy = self.policies.get(queue)
        return policy is not None and policy.fair == "batch"

    def aging(self, queue: str) -> float:
        """Seconds of waiting per priority step of ``queue``'s jobs (0: no aging), for
        its claims."""
        policy = self.policies.get(queue)
        return policy.aging if policy is not None else 0.0

    def next_token_at(self, now: float) -> float | None:
        """When the scheduler next needs the loop (for its timeout): a rate-limited
        queue with demand gets its next token, or a child kept for a claim stops
        waiting for it. None if neither."""
        times = []
        if self.buckets or self.limits.buckets:  # else no queue waits for a token
            times = [b.next_token_at(now) for q in self.demand for b in self._buckets(q, now)]
        times.extend(since + self.tuning.claim_hold for since in self._short_since.values())
        due = [t for t in times if now < t < math.inf]
        return min(due) if due else None

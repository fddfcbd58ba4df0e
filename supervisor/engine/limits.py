"""Limits that hold across supervisors (``supervisor queues limit``), as one supervisor
applies them.

Every ``REFRESH_INTERVAL`` the engine calls ``refresh``: one small read of the served
queues' limits (so a change reaches every supervisor within about half a second, by
polling: it works behind PgBouncer without LISTEN), then for each queue with a global
``max_running`` or ``max_rate`` a renewal of this supervisor's slice (``supervisor.db.
leases``, the arithmetic in ``supervisor.engine.leases``). The slice is what the planner
consults on every claim and start, locally: the claim path itself never reads or writes
a shared row, so no row gets hot however fast jobs go.

* ``max_running``: this supervisor starts a job of the queue only while its running
  jobs are below its slice (``start_cap``), and claims at most its slice times its
  prefetch depth. The slices of live leases add up to at most the limit.
* ``max_rate``: a token bucket refilled at this supervisor's slice of the rate, sized
  by its part of the burst. Jobs of such a queue are claimed only for children free now,
  so a claimed job starts at once and a start spends the token its claim took.
* ``per_key_max_running``: needs no slice; the queue's claims take the keyed claim
  statement (``per_key``), which counts running jobs per key in the database.

A slice is good for one lease (``lease_ttl``) after the renewal that granted it, less
the fence margin (``shared.defaults.fence_margin``): the others count it free once its
row expires, so with the renewal failing this supervisor stops counting on it before
then. It starts nothing more of the queue, and the engine interrupts the queue's running
jobs (``slices_lapse_at``), so the cluster never runs more than the limit while this
supervisor is cut off from the database.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence

from shared.defaults import SETTINGS_FALLBACK
from supervisor.db import Slice, Store, StoredLimits
from supervisor.engine.leases import (
    burst_slice,
    rate_slice,
    rate_target,
    running_slice,
    running_target,
)
from supervisor.engine.ratelimit import TokenBucket

log = logging.getLogger("supervisor.limits")

REFRESH_INTERVAL = 0.5  # seconds between reads of the limits and slice renewals
# While a slice is below its fair share (the others have not given their part back
# yet), the next renewal comes this soon, so the share moves over in a fraction of a
# second instead of a whole interval.
CATCH_UP_INTERVAL = 0.1
# With no limit to keep (no served queue has one, no slice held), a refresh only looks
# for a new limit: it wakes the loop this late, so while jobs run it rides on a wake that
# comes anyway (a child's answer, a claim's) instead of a timer of its own (issue 43).
LOOK_SLACK = 0.5

# (how many it could run now, how many it runs, whether it has work) for a queue.
Wants = Callable[[str], tuple[int, int, bool]]


class GlobalLimits:
    """This supervisor's view of the served queues' global limits and its slices."""

    def __init__(self, owner: str, queues: Sequence[str], lease_ttl: float,
                 now: float) -> None:
        self.owner = owner
        self.queues = list(queues)
        self.lease_ttl = lease_ttl
        self.interval = min(REFRESH_INTERVAL, lease_ttl / 3)
        self.next_refresh = now
        self.settings: dict[str, StoredLimits] = {}
        self.allowed: dict[str, int] = {}  # queue: running jobs it may start up to
        self.buckets: dict[str, TokenBucket] = {}  # queue: its slice of the rate
        self.valid_until: dict[str, float] = {}  # queue: slice good until (monotonic)
        # Seconds before a slice's row expires that this supervisor stops counting on it
        # (the engine sets its fence margin).
        self.margin = 0.0
        self.leased: set[str] = set()  # queues this supervisor holds a lease row for

    def changed(self, now: float) -> None:
        """A NOTIFY said the limits changed (or the connection came back): read them at
        the next tick."""
        self.next_refresh = now

    def due(self, now: float) -> bool:
        """Whether ``refresh`` should run now."""
        return now >= self.next_refresh

    def wake_at(self) -> float:
        """When the loop must wake for ``refresh`` at the latest: when it is due while
        a limit is kept here, ``LOOK_SLACK`` later when none is (a limit newly set
        then reaches this supervisor within ``interval + LOOK_SLACK``, a second)."""
        if self._keeping():
            return self.next_refresh
        return self.next_refresh + LOOK_SLACK

    def _keeping(self) -> bool:
        """Whether a limit is kept here: a served queue has one, or a slice is held."""
        return bool(self.leased) or any(s != _NONE for s in self.settings.values())

    def refresh(self, store: Store, now: float, wants: Wants, notified: bool = False) -> None:
        """Read the limits; renew the slice of each queue with a running or rate limit;
        give back the slices of queues whose limits were lifted. ``notified``: a change
        of the limits is told by NOTIFY (``changed``), so with no limit kept here the
        next read is the slow fallback's, not the interval's."""
        self.next_refresh = now + self.interval
        settings = store.read_limits(self.queues)
        if settings != self.settings:
            log.info("global limits now: %s", _describe(settings) or "none")
        self.settings = settings
        sliced = {q for q, s in settings.items()
                  if s.max_running is not None or s.max_rate is not None}
        lifted = self.leased - sliced
        if lifted:
            store.return_leases(sorted(lifted))
            self.leased -= lifted
        for queue in set(self.allowed) - {q for q in sliced if settings[q].max_running
                                          is not None}:
            del self.allowed[queue]
        for queue in set(self.buckets) - {q for q in sliced if settings[q].max_rate
                                          is not None}:
            del self.buckets[queue]
        for queue in sorted(sliced):
            if self._renew(store, queue, settings[queue], now, *wants(queue)):
                self.next_refresh = min(self.next_refresh, now + CATCH_UP_INTERVAL)
        if notified and not self._keeping():
            self.next_refresh = now + SETTINGS_FALLBACK

    def _renew(self, store: Store, queue: str, limits: StoredLimits,
               now: float, want_slots: int, held: int, active: bool) -> bool:
        """Renew the slice of ``queue``; returns whether it is below its fair share."""
        want_rate = limits.max_rate if active and limits.max_rate is not None else 0.0
        short = False

        def decide(others: dict) -> tuple[int, int | None, float]:
            nonlocal short
            stored, allowed = 0, None
            me = self.owner
            if limits.max_running is not None:
                stored, allowed = running_slice(limits.max_running, me, want_slots, held,
                                                others)
                short = allowed < running_target(limits.max_running, me, want_slots, others)
            rate = 0.0
            if limits.max_rate is not None:
                rate = rate_slice(limits.max_rate, me, want_rate, others)
                short = short or rate < rate_target(limits.max_rate, me, want_rate,
                                                    others) * 0.999
            return stored, allowed, rate

        def to_row(decided: tuple[int, int | None, float]) -> Slice:
            return Slice(decided[0], want_slots if limits.max_running is not None else 0,
                         decided[2], want_rate)

        _stored, allowed, rate = store.renew_lease(queue, decide, to_row)
        self.leased.add(queue)
        # ``now`` was taken before the renewal was sent: the row lives at least this long.
        self.valid_until[queue] = now + self.lease_ttl - self.margin
        if allowed is not None:
            self.allowed[queue] = allowed
        if limits.max_rate is not None:
            bucket = self.buckets.get(queue)
            if bucket is None:
                bucket = self.buckets[queue] = TokenBucket.empty(now)
            bucket.retune(rate, burst_slice(limits.burst or 1, rate, limits.max_rate), now)
        return short

    def per_key(self, queue: str) -> int | None:
        """The queue's per-concurrency-key limit, None when it has none."""
        settings = self.settings.get(queue)
        return None if settings is None else settings.per_key_max_running

    def start_cap(self, queue: str, now: float) -> int | None:
        """How many jobs of ``queue`` this supervisor may have running now (None: no
        global max_running); 0 once its slice is older than a lease."""
        allowed = self.allowed.get(queue)
        if allowed is None:
            if self.settings.get(queue, _NONE).max_running is not None:
                return 0  # set, but no slice granted yet
            return None
        return allowed if now < self.valid_until.get(queue, -math.inf) else 0

    def slices_lapse_at(self, running: Mapping[str, int]) -> float | None:
        """When the first slice of a global ``max_running`` under which jobs run here
        (``running``: jobs per queue) stops being good, unless renewed (None: no job
        runs under a slice)."""
        lapses = [self.valid_until.get(queue, -math.inf)
                  for queue in self.allowed if running.get(queue)]
        return min(lapses) if lapses else None

    def bucket(self, queue: str, now: float) -> TokenBucket | None:
        """The token bucket of ``queue``'s slice of its global rate (None: no global
        max_rate). A slice older than a lease gets rate 0."""
        bucket = self.buckets.get(queue)
        if bucket is not None and now >= self.valid_until.get(queue, -math.inf):
            bucket.retune(0.0, bucket.capacity, now)
        return bucket

    def claim_room(self, queue: str, now: float, target: int, depth: int,
                   outstanding: int) -> int | None:
        """The most jobs ``queue`` may claim now under its global limits (None: no
        running or rate limit). ``target``: children allotted to it here."""
        cap = self.start_cap(queue, now)
        rate_limited = queue in self.buckets
        if cap is None and not rate_limited:
            return None
        room = math.inf
        if cap is not None:
            room = max(cap * max(depth, 1) - outstanding, 0)
        if rate_limited:  # only for children free now: a claimed job starts at once
            room = min(room, max(min(target, cap if cap is not None else target)
                                 - outstanding, 0))
        return int(room)

    def close(self, store: Store) -> None:
        """Give back every slice (a clean exit: the others need not wait a lease)."""
        if self.leased:
            store.return_leases()
            self.leased.clear()


_NONE = StoredLimits()


def _describe(settings: dict[str, StoredLimits]) -> str:
    parts = []
    for queue, s in sorted(settings.items()):
        named = [f"{name}={value}" for name, value in (
            ("max_running", s.max_running), ("max_rate", s.max_rate), ("burst", s.burst),
            ("per_key_max_running", s.per_key_max_running)) if value is not None]
        parts.append(f"{queue} ({', '.join(named)})")
    return "; ".join(parts)

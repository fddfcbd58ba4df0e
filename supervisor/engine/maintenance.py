"""Housekeeping: every supervisor's heartbeat, and the leader's chores.

Every supervisor records a heartbeat (host, pid, children, busy, queues) for ``status``.
One supervisor at a time, whoever wins a transaction-level advisory lock in a round,
does the chores: rescue jobs whose lease expired (their supervisor died or lost its
database), prune finished jobs past their retention in bounded batches, and drop
supervisors that stopped beating. Where each rescue's and each prune's scan starts is
``ScanFloor``'s to say. The lock is taken per round, so when the leader dies
another takes over at its next round. The statements are the store's; this module only
says when and in what order. The leader also asks for the per-minute history (the
roll-up of finished jobs and each queue's depth): that is sent on a connection of its
own and the round does not wait for it (``supervisor.db.HistoryWriter``).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass

from shared import defaults
from supervisor.db import (
    FULL_SCAN,
    RESCUE_LIMIT,
    Heartbeat,
    HistoryWriter,
    Prune,
    PruneBatches,
    Store,
)
from supervisor.engine.horizon import HeldPassPacing, spaced_by_hold

log = logging.getLogger("supervisor.maintenance")

LEADER_LOCK_KEY = 0x5355_5056_4D41_494E & 0x7FFF_FFFF_FFFF_FFFF  # "SUPVMAIN"
# Seconds between passes that scan a whole index from its start (ScanFloor); longer while
# the MVCC horizon is held (``horizon.spaced_by_hold``).
FULL_SCAN_EVERY = 300.0
# Seconds between two depth samples of the per-minute history (one a minute); longer
# while the MVCC horizon is held (``HistoryWriter.space_samples``).
SAMPLE_EVERY = 60.0
# What a floor leaves below a pass's cut. A lease is written as now() + ttl and an end as
# now(), so only a statement that ran longer than this (plus the writer's TTL, or the
# retention) could write one below it.
RESCUE_FLOOR_MARGIN = 2.0
PRUNE_FLOOR_MARGIN = 1.0


def make_owner() -> str:
    """A supervisor's id (its lease owner name): host, pid and a random part, as pids
    repeat across restarts and containers."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class MaintenanceSettings:
    """How often and how much housekeeping does."""

    interval: float = defaults.MAINTENANCE_INTERVAL  # seconds between rounds
    retention: float = defaults.RETENTION  # completed, cancelled jobs older are pruned
    discarded_retention: float = defaults.DISCARDED_RETENTION
    prune_batch: int = 1000  # rows per DELETE: the table is never locked for long
    prune_budget: float = 0.2  # seconds of pruning per round at most
    stale_after: float = 60.0  # a supervisor silent this long is dropped from the registry


class ScanFloor:
    """Where a chore's next scan of an index on a time column starts: a floor below
    which an earlier pass left nothing to do (issue 40). The rescue's scan of the lease
    index (``lease_expires_at`` of running jobs) and each prune's scan of the finished
    index (``finished_at``) keep one each.

    Under a held MVCC horizon no dead row version can go, and those indexes keep an
    entry for every job that ran (or was pruned) since the hold began, all below the
    clock: a scan from the index's start walked them all, every round (1.2 million
    entries after 20 minutes at 1,000 jobs/s). But the column is only ever written
    near the writer's clock: a lease as ``now() + ttl``, an end as ``now()``. Once a
    pass has seen everything below its cut (its server clock, less the retention for a
    prune), a row more than ``below`` under that cut can only come from a statement
    that began before the pass and ran for longer than ``below`` (plus its TTL, for a
    lease): later passes start there. A row another statement had locked when a pass
    went by is left by ``SKIP LOCKED``; a full scan every ``full_every`` seconds (and
    the first) finds it."""

    def __init__(self, below: float, full_every: float = FULL_SCAN_EVERY,
                 clock=time.monotonic) -> None:
        self.below = below
        self.clock = clock
        self._floor: float | None = None  # server epoch seconds; None: scan everything
        self._full_due = 0.0
        self._last_full = float("-inf")
        self._pacing = HeldPassPacing(full_every)

    def horizon_held(self, seconds: float) -> None:
        """The MVCC horizon has been held ``seconds`` (0: not held): full passes are
        spaced by it while it lasts, and back to ``full_every`` once it lets go, the
        first of them ``AFTER_HOLD`` after the look that found it let go."""
        self._pacing.looked(seconds, self.clock())
        self._full_due = self._pacing.due(self._last_full)

    def next(self) -> float:
        """The floor for this pass (``FULL_SCAN``: the whole index)."""
        if self._floor is None or self.clock() >= self._full_due:
            return FULL_SCAN
        return self._floor

    def seen_all(self, server_now: float, used: float) -> None:
        """A pass from ``used`` saw every row below its cut, as of ``server_now`` (the
        server's clock, epoch seconds, no later than the pass began). A pass that did
        not (a full batch, a budget spent, a rescue the server's restart held back)
        says nothing, and the floor stays where it was."""
        if used == FULL_SCAN:
            self._last_full = self.clock()
            self._full_due = self._pacing.due(self._last_full)
        self._floor = server_now - self.below


class Maintenance:
    """One supervisor's heartbeat and, when it leads a round, the chores."""

    def __init__(self, queues: list[str], settings: MaintenanceSettings,
                 clock=time.monotonic, history: HistoryWriter | None = None) -> None:
        self.queues = queues
        self.settings = settings
        self.clock = clock
        self.history = history  # None: no per-minute history (tests of the chores alone)
        self.next_round = clock()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.rescue_floor = ScanFloor(RESCUE_FLOOR_MARGIN, clock=clock)
        # Completed and cancelled jobs, then discarded and expired ones: each its age.
        self.prune_floors = {
            True: ScanFloor(settings.retention + PRUNE_FLOOR_MARGIN, clock=clock),
            False: ScanFloor(settings.discarded_retention + PRUNE_FLOOR_MARGIN, clock=clock)}

    def horizon_held(self, seconds: float) -> None:
        """A look at the MVCC horizon's holder found it held ``seconds`` (0: not held):
        the full scans and the depth sample, passes from an index's start, are spaced
        by it, and the hot table is not rewritten while it lasts."""
        for floor in (self.rescue_floor, *self.prune_floors.values()):
            floor.horizon_held(seconds)
        if self.history is not None:
            self.history.space_samples(spaced_by_hold(SAMPLE_EVERY, seconds))
            self.history.horizon_held(seconds)

    def due(self, now: float) -> bool:
        """Whether a round is due."""
        return now >= self.next_round

    def run_round(self, store: Store, *, children: int, busy: int, info: dict,
                  may_lead: bool) -> int:
        """Beat, then (``may_lead``) try to lead this round's chores; returns how many
        jobs were rescued. Database errors propagate to the caller's wrapper; the next
        round comes one interval later."""
        self.next_round = self.clock() + self.settings.interval
        store.beat(Heartbeat(self.host, self.pid, self.queues, children, busy, info))
        if not may_lead:
            return 0
        floor = self.rescue_floor.next()
        led = store.lead_chores(LEADER_LOCK_KEY, self.settings.stale_after, floor)
        if led is None:
            return 0
        rescued = led.rescued
        if led.rescue_open and len(rescued) < RESCUE_LIMIT:
            self.rescue_floor.seen_all(led.began_at, floor)
        if rescued:
            lost = sorted({r.lost_owner for r in rescued if r.lost_owner})
            unstarted = sum(1 for r in rescued if r.never_started)
            log.warning("rescued %d jobs whose lease expired (%d had not started: back "
                        "without spending an attempt; lost supervisors: %s)",
                        len(rescued), unstarted, ", ".join(lost) or "?")
        self._expire(store)
        self._prune(store, led.began_at)
        if self.history is not None:
            # The per-minute history (dashboard charts): sent, not waited for.
            self.history.request()
        return len(rescued)

    def _expire(self, store: Store) -> None:
        """Waiting jobs past their expires_at end as 'expired', a batch at a time,
        within the round's pruning budget."""
        deadline = self.clock() + self.settings.prune_budget
        expired = 0
        while True:
            done = store.expire(self.settings.prune_batch)
            expired += done
            if done < self.settings.prune_batch or self.clock() >= deadline:
                break
        if expired:
            log.info("%d jobs not started before their expires_at ended as expired", expired)

    def _prune(self, store: Store, began_at: float) -> None:
        """Finished jobs past their retention, a batch at a time within the round's
        budget: completed and cancelled ones, then discarded and expired ones, each
        from its floor. ``began_at``: the server's clock as the round began."""
        settings = self.settings
        deadline = self.clock() + settings.prune_budget
        pruned = 0
        for done, age in ((True, settings.retention), (False, settings.discarded_retention)):
            floor = self.prune_floors[done].next()
            while True:
                deleted = store.prune(Prune(done, age, settings.prune_batch, floor))
                pruned += deleted
                if deleted < settings.prune_batch:
                    self.prune_floors[done].seen_all(began_at, floor)
                    break
                if self.clock() >= deadline:
                    break
        if pruned:
            log.info("pruned %d finished jobs older than the retention", pruned)
        # A batch row goes once its members and its callback have gone (issue 42): it
        # is pruned with them, never before a member or its callback.
        batches = 0
        while True:
            deleted = store.prune_batches(PruneBatches(self.settings.retention,
                                                       self.settings.prune_batch))
            batches += deleted
            if deleted < self.settings.prune_batch or self.clock() >= deadline:
                break
        if batches:
            log.info("pruned %d finished batches whose members were pruned", batches)

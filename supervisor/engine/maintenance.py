"""Housekeeping: every supervisor's heartbeat, and the leader's chores.

Every supervisor records a heartbeat (host, pid, children, busy, queues) for ``status``.
One supervisor at a time, whoever wins a transaction-level advisory lock in a round,
does the chores: rescue jobs whose lease expired (their supervisor died or lost its
database), prune finished jobs past their retention in bounded batches, and drop
supervisors that stopped beating. Where each rescue's scan of the lease index starts is
``RescueFloor``'s to say. The lock is taken per round, so when the leader dies
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
    LeadRound,
    Prune,
    PruneBatches,
    Store,
)

log = logging.getLogger("supervisor.maintenance")

LEADER_LOCK_KEY = 0x5355_5056_4D41_494E & 0x7FFF_FFFF_FFFF_FFFF  # "SUPVMAIN"
# Seconds between rescues that scan the whole lease index (RescueFloor).
FULL_RESCUE_EVERY = 300.0


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
    lease_ttl: float = defaults.LEASE_TTL  # how far ahead every lease is written


class RescueFloor:
    """Where the next rescue's scan of the lease index (``lease_expires_at``, running
    jobs) starts: a floor below which an earlier round already looked (issue 40).

    Under a held MVCC horizon no dead row version can go, and the index keeps an entry
    for every job that ran since the hold began, each with its lease in the past: a
    rescue from the index's start walked them all, every round (1.2 million entries
    after 20 minutes at 1,000 jobs/s). But a lease is only ever written as ``now() +
    ttl``, so once a round has seen every expired lease, a lease below that round's
    clock minus the TTL can only come from a statement that began more than a TTL
    before the round, and was expired before it was written: later rounds start there.
    A round that may not rescue (the server just restarted) or that put back a full
    batch moves nothing. A row another statement had locked when a round passed it is
    left by ``SKIP LOCKED``; the full scan every ``full_every`` seconds (and the first
    round, and every round of a supervisor that has not led yet) finds it."""

    def __init__(self, ttl: float, full_every: float = FULL_RESCUE_EVERY,
                 clock=time.monotonic) -> None:
        self.ttl = ttl
        self.full_every = full_every
        self.clock = clock
        self._floor: float | None = None  # server epoch seconds; None: scan everything
        self._full_due = 0.0

    def next(self) -> float:
        """The floor for this round's rescue (``FULL_SCAN``: the whole index)."""
        if self._floor is None or self.clock() >= self._full_due:
            return FULL_SCAN
        return self._floor

    def after(self, round_: LeadRound, floor: float) -> None:
        """A round this supervisor led, rescued from ``floor``, has ended."""
        if not round_.rescue_open or len(round_.rescued) >= RESCUE_LIMIT:
            return  # it did not see every expired lease: the next round looks again
        if floor == FULL_SCAN:
            self._full_due = self.clock() + self.full_every
        self._floor = round_.began_at - self.ttl


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
        self.rescue_floor = RescueFloor(settings.lease_ttl, clock=clock)

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
        self.rescue_floor.after(led, floor)
        rescued = led.rescued
        if rescued:
            lost = sorted({r.lost_owner for r in rescued if r.lost_owner})
            unstarted = sum(1 for r in rescued if r.never_started)
            log.warning("rescued %d jobs whose lease expired (%d had not started: back "
                        "without spending an attempt; lost supervisors: %s)",
                        len(rescued), unstarted, ", ".join(lost) or "?")
        self._expire(store)
        self._prune(store)
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

    def _prune(self, store: Store) -> None:
        deadline = self.clock() + self.settings.prune_budget
        pruned = 0
        while True:
            settings = self.settings
            deleted = store.prune(Prune(settings.retention, settings.discarded_retention,
                                        settings.prune_batch))
            pruned += deleted
            if deleted < self.settings.prune_batch or self.clock() >= deadline:
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

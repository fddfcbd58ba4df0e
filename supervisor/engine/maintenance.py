"""Housekeeping: every supervisor's heartbeat, and the leader's chores.

Every supervisor records a heartbeat (host, pid, children, busy, queues) for ``status``.
One supervisor at a time, whoever wins a transaction-level advisory lock in a round,
does the chores: rescue jobs whose lease expired (their supervisor died or lost its
database), prune finished jobs past their retention in bounded batches, and drop
supervisors that stopped beating. The lock is taken per round, so when the leader dies
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
from supervisor.db import Heartbeat, HistoryWriter, Prune, PruneBatches, Store

log = logging.getLogger("supervisor.maintenance")

LEADER_LOCK_KEY = 0x5355_5056_4D41_494E & 0x7FFF_FFFF_FFFF_FFFF  # "SUPVMAIN"


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
        rescued = store.lead_chores(LEADER_LOCK_KEY, self.settings.stale_after)
        if rescued is None:
            return 0
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

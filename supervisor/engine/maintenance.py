"""Housekeeping: every supervisor's heartbeat, and the leader's chores.

Every supervisor records a heartbeat in ``supervisor.supervisors`` (host, pid, children,
busy, queues) for ``status``. One supervisor at a time, whoever wins a transaction-level
advisory lock in a round, does the chores: rescue jobs whose lease expired (their
supervisor died or lost its database), prune finished jobs past their retention in
bounded batches, and drop supervisors that stopped beating. The lock is taken per round,
so when the leader dies another takes over at its next round: within one interval.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass

import orjson
import psycopg

from supervisor.db.store import Store

log = logging.getLogger("supervisor.maintenance")

LEADER_LOCK_KEY = 0x5355_5056_4D41_494E & 0x7FFF_FFFF_FFFF_FFFF  # "SUPVMAIN"

_BEAT = """
INSERT INTO supervisor.supervisors (id, host, pid, queues, children, busy, info)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(children)s, %(busy)s, %(info)s)
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = now(), children = EXCLUDED.children, busy = EXCLUDED.busy,
    queues = EXCLUDED.queues, info = EXCLUDED.info
"""

PRUNE = """
DELETE FROM supervisor.jobs
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE state IN ('completed', 'discarded', 'cancelled')
      AND finished_at < now() - %(retention)s * interval '1 second'
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED))
"""

_DROP_STALE = """
DELETE FROM supervisor.supervisors
WHERE heartbeat_at < now() - %(stale)s * interval '1 second'
"""


def make_owner() -> str:
    """A supervisor's id (its lease owner name): host, pid and a random part, as pids
    repeat across restarts and containers."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class MaintenanceSettings:
    """How often and how much housekeeping does."""

    interval: float = 5.0  # seconds between rounds (beat + chores)
    retention: float = 7 * 24 * 3600.0  # finished jobs older than this are pruned
    prune_batch: int = 1000  # rows per DELETE: the table is never locked for long
    prune_budget: float = 0.2  # seconds of pruning per round at most
    stale_after: float = 60.0  # a supervisor silent this long is dropped from the registry


class Maintenance:
    """One supervisor's heartbeat and, when it leads a round, the chores."""

    def __init__(self, owner: str, queues: list[str], settings: MaintenanceSettings,
                 clock=time.monotonic) -> None:
        self.owner = owner
        self.queues = queues
        self.settings = settings
        self.clock = clock
        self.next_round = clock()
        self.host = socket.gethostname()
        self.pid = os.getpid()

    def due(self, now: float) -> bool:
        """Whether a round is due."""
        return now >= self.next_round

    def run_round(self, store: Store, *, children: int, busy: int,
                  info: dict | None = None) -> None:
        """Beat, then try to lead this round. Connection errors propagate (the caller's
        database wrapper handles outages); the next round comes one interval later."""
        now = self.clock()
        self.next_round = now + self.settings.interval
        conn = store.conn
        conn.execute(_BEAT, {"id": self.owner, "host": self.host, "pid": self.pid,
                             "queues": self.queues, "children": children, "busy": busy,
                             "info": orjson.dumps(info or {}).decode()})
        with conn.transaction():
            got = conn.execute("SELECT pg_try_advisory_xact_lock(%s)",
                               (LEADER_LOCK_KEY,)).fetchone()[0]
            if not got:
                return
            rescued = store.rescue_expired()
            conn.execute(_DROP_STALE, {"stale": self.settings.stale_after})
        if rescued:
            lost = sorted({owner for _, owner in rescued if owner})
            log.warning("rescued %d jobs whose lease expired (lost supervisors: %s)",
                        len(rescued), ", ".join(lost) or "?")
        self._prune(conn)

    def _prune(self, conn: psycopg.Connection) -> None:
        deadline = self.clock() + self.settings.prune_budget
        params = {"retention": self.settings.retention, "batch": self.settings.prune_batch}
        pruned = 0
        while True:
            deleted = max(conn.execute(PRUNE, params).rowcount, 0)
            pruned += deleted
            if deleted < self.settings.prune_batch or self.clock() >= deadline:
                break
        if pruned:
            log.info("pruned %d finished jobs older than the retention", pruned)

    def leave(self, store: Store) -> None:
        """Remove this supervisor's row on a clean exit."""
        store.conn.execute("DELETE FROM supervisor.supervisors WHERE id = %s", (self.owner,))

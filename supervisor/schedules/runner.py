"""``Schedules``: what the supervisor's loop holds to fire its schedules.

The loop asks ``next_due()`` (a monotonic time to wake at) and, once it is reached,
calls ``fire_due(conn)``. Every supervisor that defines a schedule runs the same rounds;
none is a leader. A round reads each schedule's mark, and for those with a due slot runs
one short transaction (row lock with SKIP LOCKED, plan, insert job and fire row, move
the mark); the unique key on (schedule, slot) keeps a slot from firing twice even if two
supervisors plan it at once. Due times are reckoned on the database's clock, so hosts
whose clocks disagree still agree on the slots.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from datetime import datetime

import psycopg

from shared.schedules import ScheduleSpec
from supervisor.schedules import store
from supervisor.schedules.firing import GRACE, fire_schedule
from supervisor.schedules.slots import next_slot

log = logging.getLogger("supervisor.schedules")

SEEN_INTERVAL = 30.0  # how often a supervisor re-declares its schedules (orphan detection)
RECHECK = 0.5  # a schedule another supervisor was firing is looked at again this soon
RETRY_AFTER = 1.0  # after a round failed (database trouble), try again this soon
WAKE_LATE = 0.002  # wake just after a slot, never just before it
FIRE_HISTORY = 86_400.0  # seconds of fire records kept
PRUNE_INTERVAL = 600.0


class Schedules:
    """The schedules one supervisor fires: ``next_due()`` and ``fire_due(conn)``."""

    def __init__(self, definitions: Iterable[ScheduleSpec], owner: str = "?", *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, grace: float = GRACE) -> None:
        self.specs = {s.name: s for s in definitions}
        self.owner = owner
        self.clock = clock
        self.wall = wall
        self.grace = grace
        self.offset = 0.0  # database clock minus our wall clock, measured each round
        now = clock()
        self._next_round: float | None = now if self.specs else None
        self._synced = False
        self._seen_due = now + SEEN_INTERVAL
        self._prune_due = now
        self.fired = 0  # jobs enqueued by this supervisor since it started

    def next_due(self) -> float | None:
        """The monotonic time the loop should call ``fire_due`` at; None without any
        schedule."""
        return self._next_round

    def fire_due(self, conn: psycopg.Connection) -> int:
        """Run one round on the autocommit ``conn``: fire every due slot of this
        supervisor's schedules; returns the jobs enqueued. Raises psycopg errors for the
        caller to handle (the next round is then due in ``RETRY_AFTER`` seconds)."""
        if not self.specs:
            return 0
        now, wall_now = self.clock(), self.wall()
        self._next_round = now + RETRY_AFTER
        names = list(self.specs)
        if not self._synced:
            store.sync(conn, list(self.specs.values()))
            self._synced = True
            log.info("schedules: %s", ", ".join(f"{s.name} ({s.expression})"
                                                for s in self.specs.values()))
        elif now >= self._seen_due:
            store.mark_seen(conn, names)
        if now >= self._seen_due:
            self._seen_due = now + SEEN_INTERVAL
        marks, db_now = store.read_marks(conn, names)
        if len(marks) < len(names):  # a row deleted by hand: declare it again
            store.sync(conn, [self.specs[n] for n in names if n not in marks])
            marks, db_now = store.read_marks(conn, names)
        self.offset = db_now.timestamp() - self.wall()  # read right after the query
        enqueued = 0
        wake = [self._seen_due]
        order = list(marks.items())
        random.shuffle(order)  # supervisors racing for one round mostly take different rows
        for name, (done_until, paused) in order:
            spec = self.specs[name]
            due = next_slot(spec, done_until)
            if not paused and due is not None and due <= db_now:
                result = fire_schedule(conn, spec, self.owner, grace=self.grace)
                enqueued += result.jobs
                if result.locked:
                    wake.append(now + RECHECK)
            upcoming = next_slot(spec, db_now)
            if upcoming is not None:
                wake.append(self._monotonic_at(upcoming, now, wall_now))
        if now >= self._prune_due:
            self._prune_due = now + PRUNE_INTERVAL
            store.prune_fires(conn, names, FIRE_HISTORY)
        self.fired += enqueued
        self._next_round = min(wake)
        return enqueued

    def _monotonic_at(self, instant: datetime, now: float, wall_now: float) -> float:
        """The monotonic time at which the database's clock reads ``instant``, given the
        monotonic and wall clocks read together (``now``, ``wall_now``)."""
        return now + (instant.timestamp() - self.offset - wall_now) + WAKE_LATE

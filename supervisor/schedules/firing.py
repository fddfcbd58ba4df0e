"""One schedule's firing: which slots are due (pure), and the transaction that fires them.

A slot is *on time* while it is at most ``grace`` seconds old: it fires on its own.
Older due slots were *missed* (no supervisor ran, or all were stalled): by default they
are coalesced into one fire at the newest due slot, whose ``coalesced`` count says how
many it stands for (the on-time slots older than it are part of that fire: a user who
asked for coalescing gets one job, not one plus each slot of the grace); with
``catch_up`` each fires, up to ``CATCH_UP_LIMIT`` (the oldest beyond the cap are folded
into the first replay's count). With ``overlap = False`` a
round fires at most one job, and none while the previous fire's job is still live; the
other slots are recorded as skipped. Either way every slot is accounted for by exactly
one fire row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg import errors

from shared.schedules import ScheduleSpec
from supervisor.schedules import store
from supervisor.schedules.slots import slots_between

log = logging.getLogger("supervisor.schedules")

GRACE = 2.0  # seconds a slot may be late and still fire on its own
CATCH_UP_LIMIT = 100  # replayed slots at most per round, with catch_up
ON_TIME_LIMIT = 1_000  # on-time slots per round: bounded by grace, this is a safety cap


@dataclass(frozen=True)
class Fire:
    """One planned fire: its slot, how many slots it stands for, and whether it
    enqueues a job (False: recorded as skipped)."""

    slot: datetime
    coalesced: int = 1
    run: bool = True


def plan(spec: ScheduleSpec, done_until: datetime, now: datetime, *,
         grace: float = GRACE, previous_live: bool = False) -> list[Fire]:
    """The fires due at ``now`` for slots after ``done_until``, oldest first."""
    edge = now - timedelta(seconds=grace)
    fires: list[Fire] = []
    keep = CATCH_UP_LIMIT if spec.catch_up else 1
    missed, missed_total = slots_between(spec, done_until, edge, keep)
    on_time, on_time_total = slots_between(spec, max(done_until, edge), now, ON_TIME_LIMIT)
    if missed and not spec.catch_up:
        # One fire at the newest due slot stands for the missed slots and for the on-time
        # ones before it.
        fires.append(Fire((on_time or missed)[-1], missed_total + on_time_total))
    else:
        if missed:
            folded = missed_total - len(missed)  # slots beyond the cap
            fires.append(Fire(missed[0], 1 + folded))
            fires.extend(Fire(slot) for slot in missed[1:])
        fires.extend(Fire(slot) for slot in on_time)
    if not spec.overlap and fires:
        runs_first = not previous_live
        fires = [Fire(f.slot, f.coalesced, runs_first and i == 0) for i, f in enumerate(fires)]
    return fires


@dataclass(frozen=True)
class RoundResult:
    """What one schedule's firing transaction did."""

    jobs: int = 0  # jobs enqueued
    locked: bool = False  # another supervisor holds the schedule right now
    conflict: bool = False  # the unique key refused a slot: someone fired it already


def fire_schedule(conn: psycopg.Connection, spec: ScheduleSpec, owner: str, *,
                  grace: float = GRACE) -> RoundResult:
    """Fire what is due for ``spec`` in one transaction on the autocommit ``conn``:
    lock the schedule's row, plan from its mark, insert the jobs and fire rows, move the
    mark. A slot fired elsewhere meanwhile makes the whole transaction roll back."""
    try:
        with conn.transaction():
            state = store.lock_for_firing(conn, spec.name)
            if state is None:
                return RoundResult(locked=True)
            done_until, paused, previous_live, now = state
            if paused:
                return RoundResult()
            fires = plan(spec, done_until, now, grace=grace, previous_live=previous_live)
            if not fires:
                return RoundResult()
            return RoundResult(jobs=commit_fires(conn, spec, owner, fires))
    except errors.UniqueViolation:
        log.info("schedule %r: a slot was already fired by another supervisor", spec.name)
        return RoundResult(conflict=True)


def commit_fires(conn: psycopg.Connection, spec: ScheduleSpec, owner: str,
                 fires: list[Fire]) -> int:
    """Inside a transaction: insert the fires and move the mark; returns jobs enqueued.
    The unique key on (schedule, slot) raises ``UniqueViolation`` for a slot already
    fired, whatever the caller believed about its lock."""
    rows = store.insert_fires(conn, spec, owner,
                              [(f.slot, f.coalesced, f.run) for f in fires])
    enqueued = [job_id for _, job_id in rows if job_id is not None]
    store.advance(conn, spec.name, fires[-1].slot, fires[-1].slot,
                  enqueued[-1] if enqueued else None)
    coalesced = sum(f.coalesced for f in fires) - len(fires)
    if coalesced:
        log.info("schedule %r: %d missed slots coalesced", spec.name, coalesced)
    skipped = sum(1 for f in fires if not f.run)
    if skipped:
        log.info("schedule %r: %d slots skipped, the previous fire still runs",
                 spec.name, skipped)
    return len(enqueued)

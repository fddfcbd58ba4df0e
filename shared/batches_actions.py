"""A batch acted on as one thing: cancel, retry its failed members, pause, resume,
reprioritize (issue 42), and the failure budget's checks.

Each action works in chunks of ``CHUNK`` members, each chunk its own short transaction
on an autocommit connection, so a million-member batch holds no long lock. The marks
that must hold from the first moment (a stop, a pause) are committed first, under the
batch's advisory lock (the one schema 0006's trigger closes the batch under): from that
commit no member is claimed (schema 0025's claim guard), and the chunks then settle the
members. ``supervisor.batch_drain`` (0025) does one chunk of a stop or a pause, so the
claims that meet a stopped batch and these loops share one definition.

Every chunk picks its rows as ``id = ANY(ARRAY(SELECT ... LIMIT n FOR UPDATE SKIP
LOCKED))``, the claim's form: written as ``id IN (SELECT ...)``, statistics taken while
the table was empty planned the resume of a 100,000-member batch as a nested loop that
ran for minutes per chunk.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import psycopg

from shared.archived import unarchive
from shared.defaults import NOTIFY_CHANNEL

CHUNK = 1000
# A member locked by a claim or a completion at the moment is skipped by a chunk; the
# loop looks again this many times (it is being settled by its holder meanwhile).
_SETTLE_ROUNDS = 50
# Where a paused member waits: a day before shared.batches.HOLD, so that `status` does
# not count it among the jobs held for their dependencies (run_at >= HOLD).
HOLD = "9999-12-30 00:00:00+00"

_LOCK = "SELECT pg_advisory_xact_lock(1112818504, (%s::bigint %% 2147483647)::int)"
_ROW = """SELECT finished_at IS NOT NULL, stop_kind, paused_at IS NOT NULL
FROM supervisor.batches WHERE id = %s FOR UPDATE"""
_OPEN = """SELECT count(*) FROM supervisor.jobs WHERE batch_id = %s
  AND state IN ('available', 'scheduled', 'running', 'retryable')"""


@dataclass(frozen=True)
class ActionResult:
    """What an action on a batch did: the members it changed."""

    batch_id: int
    action: str
    changed: int
    seconds: float


class BatchActionRefused(ValueError):
    """The action cannot apply to this batch now (finished, stopped, nothing to do);
    its message is one line and nothing was changed."""


def check_budget(max_failures: object, max_failure_rate: object) -> None:
    """A failure budget is a positive integer and/or a rate in (0, 1]: ``ValueError``
    (one line) otherwise, before anything is written."""
    if max_failures is not None and (
            not isinstance(max_failures, int) or isinstance(max_failures, bool)
            or not 1 <= max_failures < 2**31):
        raise ValueError(f"max_failures must be a positive integer, not {max_failures!r}")
    if max_failure_rate is not None and (
            not isinstance(max_failure_rate, int | float) or isinstance(max_failure_rate, bool)
            or not math.isfinite(max_failure_rate) or not 0 < max_failure_rate <= 1):
        raise ValueError(f"max_failure_rate must be a number in (0, 1], "
                         f"not {max_failure_rate!r}")


def _open_batch(conn: psycopg.Connection, batch_id: int, action: str,
                ) -> tuple[bool, str | None, bool]:
    """Lock the batch (advisory, then row) in the current transaction; its (finished,
    stop_kind, paused). ``LookupError`` when there is none."""
    conn.execute(_LOCK, (batch_id,))
    row = conn.execute(_ROW, (batch_id,)).fetchone()
    if row is None:
        raise LookupError(f"batch {batch_id} does not exist")
    return row[0], row[1], row[2]


def _refuse_finished(batch_id: int, action: str, finished: bool, stop: str | None) -> None:
    if finished:
        how = f" ({stop})" if stop else ""
        raise BatchActionRefused(f"batch {batch_id} is finished{how}: nothing to {action}")
    if stop:
        raise BatchActionRefused(f"batch {batch_id} is {stop} already: nothing to {action}")


def _drain(conn: psycopg.Connection, batch_id: int) -> int:
    """``batch_drain`` chunk by chunk until no member is left to settle."""
    changed = idle = 0
    while True:
        with conn.transaction():
            n = conn.execute("SELECT supervisor.batch_drain(%s, %s, true)",
                             (batch_id, CHUNK)).fetchone()[0]  # type: ignore[index]
        changed += n
        if n:
            idle = 0
            continue
        # None changed: done, unless some members were locked by their claim or
        # completion just now (skipped); those settle in a moment.
        idle += 1
        if idle > _SETTLE_ROUNDS or not _left_to_settle(conn, batch_id):
            return changed
        time.sleep(0.02)


def _left_to_settle(conn: psycopg.Connection, batch_id: int) -> bool:
    row = conn.execute("""
        SELECT EXISTS (SELECT 1 FROM supervisor.jobs j JOIN supervisor.batches b
                         ON b.id = j.batch_id
                       WHERE j.batch_id = %(b)s AND b.finished_at IS NULL AND (
                         (b.stopped_at IS NOT NULL
                          AND j.state IN ('available', 'scheduled', 'running', 'retryable'))
                         OR (b.stopped_at IS NULL AND b.paused_at IS NOT NULL
                             AND (j.state IN ('available', 'retryable')
                                  OR (j.state = 'scheduled' AND j.run_at < %(hold)s)))))
        """, {"b": batch_id, "hold": HOLD}).fetchone()
    return bool(row and row[0])


def cancel(conn: psycopg.Connection, batch_id: int) -> ActionResult:
    """Stop the batch: from this commit no member is claimed; members claimed before it
    (running, or queued in a child's pipe) are cancelled in the same commit and their
    supervisors told with it, so one already queued starts only if its child reaches it
    before that notice does (milliseconds), and is then interrupted; waiting members end
    cancelled; the callback is enqueued once, when the last member is final. ``conn``
    in autocommit mode."""
    began = time.monotonic()
    with conn.transaction():
        finished, stop, _ = _open_batch(conn, batch_id, "cancel")
        _refuse_finished(batch_id, "cancel", finished, stop)
        conn.execute("SELECT supervisor.batch_stop(%s, 'cancelled', 'cancelled by operator')",
                     (batch_id,))
        # The first chunk before the commit: its NOTIFY to the members' supervisors
        # leaves with the stop mark, not one transaction later (a member queued to a
        # child began 5-12 ms after the commit in the batch storm when it did). It skips
        # rows locked now: a completion holding one waits for the batch's lock, which
        # this transaction holds (a deadlock); the chunks after the commit wait for them.
        first = conn.execute("SELECT supervisor.batch_drain(%s, %s, false)",
                             (batch_id, CHUNK)).fetchone()[0]  # type: ignore[index]
    changed = first + _drain(conn, batch_id)
    return ActionResult(batch_id, "cancel", changed, time.monotonic() - began)


def pause(conn: psycopg.Connection, batch_id: int) -> ActionResult:
    """Hold the batch: from this commit no member starts; waiting members wait (held)
    until ``resume``. Running members finish."""
    began = time.monotonic()
    with conn.transaction():
        finished, stop, paused = _open_batch(conn, batch_id, "pause")
        _refuse_finished(batch_id, "pause", finished, stop)
        if paused:
            raise BatchActionRefused(f"batch {batch_id} is paused already")
        conn.execute("UPDATE supervisor.batches SET paused_at = now() WHERE id = %s",
                     (batch_id,))
    changed = _drain(conn, batch_id)
    return ActionResult(batch_id, "pause", changed, time.monotonic() - began)


# The next members of the batch in id order, whatever their state, through the batch's
# (batch_id, id) index; then those of them held by the pause are released. Asking for
# "held members" directly, or "these ids if held", was planned through the run_at index
# with statistics taken before the pause (none at 9999-12-30 then): each chunk read every
# held member, 22 s (58 s) for 100,000.
_NEXT_MEMBERS = """SELECT id FROM supervisor.jobs WHERE batch_id = %(b)s AND id > %(after)s
ORDER BY batch_id, id LIMIT %(cap)s"""
_RESUME_CHUNK = """
UPDATE supervisor.jobs SET state = 'available', run_at = now()
WHERE id = ANY(%(ids)s::bigint[])
  -- state = 'scheduled' AND run_at = HOLD, written so that neither the run_at index nor
  -- the scheduled jobs' partial index can serve it: the statistics from before the
  -- pause would choose one and read every held member per chunk (see above).
  AND coalesce(state, '') = 'scheduled'
  AND extract(epoch FROM run_at) = extract(epoch FROM %(hold)s::timestamptz)
RETURNING queue
"""


def resume(conn: psycopg.Connection, batch_id: int) -> ActionResult:
    """Undo ``pause``: the held members are available again, at once (a member that
    was delayed or backing off before the pause no longer waits for it)."""
    began = time.monotonic()
    with conn.transaction():
        finished, stop, paused = _open_batch(conn, batch_id, "resume")
        _refuse_finished(batch_id, "resume", finished, stop)
        if not paused:
            raise BatchActionRefused(f"batch {batch_id} is not paused: nothing to resume")
        conn.execute("UPDATE supervisor.batches SET paused_at = NULL WHERE id = %s",
                     (batch_id,))
    changed, after = 0, 0
    while True:
        with conn.transaction():
            ids = [r[0] for r in conn.execute(_NEXT_MEMBERS, {"b": batch_id, "after": after,
                                                               "cap": CHUNK})]
            released = [r[0] for r in conn.execute(_RESUME_CHUNK, {"ids": ids, "hold": HOLD})
                        ] if ids else []
            for queue in set(released):
                conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, queue))
        changed += len(released)
        if not ids:
            return ActionResult(batch_id, "resume", changed, time.monotonic() - began)
        after = ids[-1]


_PRIORITY_CHUNK = """
WITH r AS (
    UPDATE supervisor.jobs SET priority = %(p)s
    WHERE id = ANY(ARRAY(SELECT id FROM supervisor.jobs
                   WHERE batch_id = %(b)s AND id > %(after)s
                   AND state IN ('available', 'scheduled', 'retryable')
                 ORDER BY batch_id, id LIMIT %(cap)s FOR UPDATE SKIP LOCKED))
    RETURNING id)
SELECT count(*), max(id) FROM r
"""


def reprioritize(conn: psycopg.Connection, batch_id: int, priority: int) -> ActionResult:
    """Give every member not started yet ``priority`` (lower runs first, as for
    ``enqueue``); running and finished members keep theirs."""
    if not isinstance(priority, int) or isinstance(priority, bool) \
            or not -(2**31) <= priority < 2**31:
        raise ValueError(f"priority must be a 32-bit int, not {priority!r}")
    began = time.monotonic()
    with conn.transaction():
        finished, stop, _ = _open_batch(conn, batch_id, "reprioritize")
        _refuse_finished(batch_id, "reprioritize", finished, stop)
    changed, after = 0, 0
    while True:
        with conn.transaction():
            n, last = conn.execute(_PRIORITY_CHUNK, {"p": priority, "b": batch_id,
                                                     "after": after, "cap": CHUNK}
                                   ).fetchone()  # type: ignore[misc]
        changed += n
        if n == 0:
            return ActionResult(batch_id, "reprioritize", changed, time.monotonic() - began)
        after = last


_FAILED_IDS = """SELECT id FROM supervisor.jobs WHERE batch_id = %s AND id > %s
  AND state = 'discarded' ORDER BY batch_id, id LIMIT %s"""
_RETRY_CHUNK = """
UPDATE supervisor.jobs SET state = 'available', attempt = 0, run_at = now(),
    finished_at = NULL, lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
    progress = NULL
WHERE id = ANY(%s::bigint[]) AND state = 'discarded'
RETURNING queue
"""
# The batch runs again: its callback is enqueued again once the retried members are
# final; the stop and the budget's counters start afresh.
_REOPEN = """UPDATE supervisor.batches SET finished_at = NULL, callback_id = NULL,
    stopped_at = NULL, stop_kind = NULL, stop_reason = NULL, paused_at = NULL,
    failures = 0, successes = 0, called_on_failure = false WHERE id = %s"""


def retry_failed(conn: psycopg.Connection, batch_id: int) -> ActionResult:
    """Run the batch's failed (discarded) members again, exactly those, with a full set
    of attempts. A finished batch is opened again in the transaction of the last chunk,
    so its callback runs again once they are final (not before the last chunk is in)."""
    began = time.monotonic()
    with conn.transaction():
        finished, stop, _ = _open_batch(conn, batch_id, "retry")
        if stop and not finished:
            raise BatchActionRefused(f"batch {batch_id} is being {stop}: retry its failed "
                                     "members once it is finished")
        if conn.execute("SELECT 1 FROM supervisor.jobs WHERE batch_id = %s "
                        "AND state = 'discarded' LIMIT 1", (batch_id,)).fetchone() is None:
            raise BatchActionRefused(f"batch {batch_id} has no failed members: nothing to "
                                     "retry")
    changed, after = 0, 0
    while True:
        ids = [r[0] for r in conn.execute(_FAILED_IDS, (batch_id, after, CHUNK + 1))]
        last = len(ids) <= CHUNK
        ids = ids[:CHUNK]
        with conn.transaction():
            if last:
                finished, _, _ = _open_batch(conn, batch_id, "retry")
                if finished:
                    conn.execute(_REOPEN, (batch_id,))
            unarchive(conn, ids)  # discarded members may be in an archive
            retried = [r[0] for r in conn.execute(_RETRY_CHUNK, (ids,))]
            changed += len(retried)
            for queue in set(retried):
                conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, queue))
        if last:
            break
        after = ids[-1]
    return ActionResult(batch_id, "retry_failed", changed, time.monotonic() - began)

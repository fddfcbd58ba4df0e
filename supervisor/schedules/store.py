"""Every SQL statement the schedules room runs, for the supervisor's rounds and the CLI.

Functions take a psycopg connection and return plain data. Those that must run inside
the firing transaction say so; the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from shared.schedules import ScheduleSpec

LIVE_STATES = ("available", "scheduled", "running", "retryable")

_SYNC = """
INSERT INTO supervisor.schedules AS s
    (name, kind, queue, args, priority, cron, every, timezone, catch_up, overlap, source)
SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::jsonb[], %s::int[],
                     %s::text[], %s::int[], %s::text[], %s::bool[], %s::bool[], %s::text[])
ON CONFLICT (name) DO UPDATE SET
    kind = EXCLUDED.kind, queue = EXCLUDED.queue, args = EXCLUDED.args,
    priority = EXCLUDED.priority, cron = EXCLUDED.cron, every = EXCLUDED.every,
    timezone = EXCLUDED.timezone, catch_up = EXCLUDED.catch_up, overlap = EXCLUDED.overlap,
    source = EXCLUDED.source, seen_at = now(),
    updated_at = CASE WHEN (s.kind, s.queue, s.args, s.priority, s.cron, s.every, s.timezone,
                            s.catch_up, s.overlap, s.source)
                           IS DISTINCT FROM
                           (EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.args, EXCLUDED.priority,
                            EXCLUDED.cron, EXCLUDED.every, EXCLUDED.timezone,
                            EXCLUDED.catch_up, EXCLUDED.overlap, EXCLUDED.source)
                      THEN now() ELSE s.updated_at END
"""


def sync(conn: psycopg.Connection, specs: Sequence[ScheduleSpec]) -> None:
    """Declare these definitions: insert new schedules (their mark starts now, so they
    never fire the past), update changed ones, and mark all of them as seen."""
    if not specs:
        return
    columns: list[list[Any]] = [[] for _ in range(11)]
    for s in sorted(specs, key=lambda s: s.name):  # a stable order: no deadlock between two
        for column, value in zip(columns, (s.name, s.kind, s.queue, s.args_json(), s.priority,
                                           s.cron, s.every, s.timezone, s.catch_up, s.overlap,
                                           s.source), strict=True):
            column.append(value)
    conn.execute(_SYNC, columns)


def mark_seen(conn: psycopg.Connection, names: Iterable[str]) -> None:
    """Refresh ``seen_at``: these schedules are still defined by a running supervisor."""
    conn.execute("UPDATE supervisor.schedules SET seen_at = now() WHERE name = ANY(%s)",
                 (list(names),))


def read_marks(conn: psycopg.Connection,
               names: Iterable[str]) -> tuple[dict[str, tuple[datetime, bool]], datetime]:
    """``{name: (done_until, paused)}`` for these schedules, and the database's clock."""
    rows = conn.execute(
        "SELECT name, done_until, paused, clock_timestamp() FROM supervisor.schedules"
        " WHERE name = ANY(%s)", (list(names),)).fetchall()
    if rows:
        now = rows[0][3]
    else:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None  # a SELECT without FROM answers one row
        now = row[0]
    return {name: (done, paused) for name, done, paused, _ in rows}, now


def lock_for_firing(conn: psycopg.Connection, name: str) -> tuple[datetime, bool, bool,
                                                                   datetime] | None:
    """Inside the firing transaction: lock the schedule's row unless another supervisor
    holds it (then None), and return ``(done_until, paused, last job live, db clock)``."""
    row = conn.execute(
        """SELECT s.done_until, s.paused,
                  EXISTS (SELECT 1 FROM supervisor.jobs j
                          WHERE j.id = s.last_job_id AND j.state = ANY(%s)),
                  clock_timestamp()
             FROM supervisor.schedules s WHERE s.name = %s
              FOR UPDATE OF s SKIP LOCKED""", (list(LIVE_STATES), name)).fetchone()
    return None if row is None else (row[0], row[1], row[2], row[3])


_FIRE = """
WITH wanted AS (
    SELECT * FROM unnest(%(slots)s::timestamptz[], %(coalesced)s::int[], %(run)s::bool[])
        AS w(slot, coalesced, run)
), inserted AS (
    INSERT INTO supervisor.jobs (kind, queue, args, priority, run_at)
    SELECT %(kind)s, %(queue)s, %(args)s::jsonb, %(priority)s, slot FROM wanted WHERE run
    RETURNING id, run_at
)
INSERT INTO supervisor.schedule_fires (schedule, slot, job_id, outcome, coalesced, fired_by)
SELECT %(name)s, w.slot, i.id, CASE WHEN w.run THEN %(outcome)s ELSE 'skipped' END,
       w.coalesced, %(owner)s
  FROM wanted w LEFT JOIN inserted i ON i.run_at = w.slot
RETURNING slot, job_id
"""


def insert_fires(conn: psycopg.Connection, spec: ScheduleSpec, owner: str,
                 fires: Sequence[tuple[datetime, int, bool]],
                 outcome: str = "fired") -> list[tuple[datetime, int | None]]:
    """Inside the firing transaction: one job per ``(slot, coalesced, run)`` with
    ``run`` true (its ``run_at`` is the slot) and one fire row per slot. Raises
    ``psycopg.errors.UniqueViolation`` if any slot was already fired: the caller's
    transaction then rolls back whole, jobs included."""
    rows = conn.execute(_FIRE, {
        "slots": [f[0] for f in fires], "coalesced": [f[1] for f in fires],
        "run": [f[2] for f in fires], "kind": spec.kind, "queue": spec.queue,
        "args": spec.args_json(), "priority": spec.priority, "name": spec.name,
        "outcome": outcome, "owner": owner}).fetchall()
    return sorted((r[0], r[1]) for r in rows)


def advance(conn: psycopg.Connection, name: str, done_until: datetime, last_slot: datetime,
            last_job_id: int | None) -> None:
    """Inside the firing transaction: move the schedule's mark past the slots fired."""
    conn.execute(
        """UPDATE supervisor.schedules
              SET done_until = greatest(done_until, %s), last_slot = %s,
                  last_job_id = coalesce(%s, last_job_id), last_fired_at = now(),
                  seen_at = now()
            WHERE name = %s""", (done_until, last_slot, last_job_id, name))


def prune_fires(conn: psycopg.Connection, names: Iterable[str], keep_seconds: float) -> int:
    """Forget fire records older than ``keep_seconds``; the mark alone keeps old slots
    from firing again. Returns the rows deleted."""
    cur = conn.execute(
        "DELETE FROM supervisor.schedule_fires WHERE schedule = ANY(%s)"
        " AND slot < now() - make_interval(secs => %s)", (list(names), keep_seconds))
    return cur.rowcount


# -- for the CLI ---------------------------------------------------------------------------
def list_rows(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Every schedule with its last fire's job state (None if pruned or never fired)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            """SELECT s.*, j.state AS last_state, clock_timestamp() AS db_now,
                      clock_timestamp() - s.seen_at AS unseen_for
                 FROM supervisor.schedules s
                 LEFT JOIN supervisor.jobs j ON j.id = s.last_job_id
                ORDER BY s.name""").fetchall()


def set_paused(conn: psycopg.Connection, name: str, paused: bool) -> bool | None:
    """Pause or resume; returns whether it was paused before, None if no such schedule.
    Resuming moves the mark to now: slots that passed while paused are not replayed."""
    row = conn.execute(
        """UPDATE supervisor.schedules n
              SET paused = %s, updated_at = now(),
                  done_until = CASE WHEN %s THEN n.done_until
                                    ELSE greatest(n.done_until, now()) END
             FROM (SELECT name, paused FROM supervisor.schedules WHERE name = %s
                   FOR UPDATE) o
            WHERE n.name = o.name
        RETURNING o.paused""", (paused, paused, name)).fetchone()
    return None if row is None else row[0]


def fire_now(conn: psycopg.Connection, name: str) -> int | None:
    """Enqueue the schedule's job now, as stored, whatever its slots; returns the job id
    (None if no such schedule). Does not move the mark: the next slot fires as usual."""
    with conn.transaction():
        row = conn.execute(
            """SELECT name, kind, queue, args, priority, clock_timestamp()
                 FROM supervisor.schedules WHERE name = %s FOR UPDATE""", (name,)).fetchone()
        if row is None:
            return None
        _, kind, queue, args, priority, now = row
        inserted = conn.execute(
            """INSERT INTO supervisor.jobs (kind, queue, args, priority, run_at)
               VALUES (%s, %s, %s, %s, %s) RETURNING id""",
            (kind, queue, Jsonb(args), priority, now)).fetchone()
        assert inserted is not None  # a plain INSERT ... RETURNING answers its row
        job_id = inserted[0]
        conn.execute(
            """INSERT INTO supervisor.schedule_fires (schedule, slot, job_id, outcome, fired_by)
               VALUES (%s, %s, %s, 'manual', 'cli')""", (name, now, job_id))
        conn.execute(
            """UPDATE supervisor.schedules SET last_job_id = %s, last_fired_at = now()
                WHERE name = %s""", (job_id, name))
    return job_id

"""What a run's failures came to, read from the table: the jobs this supervisor
discarded, by reason, and the dependents cancelled because one of them (or a dependent
cancelled for it, and so on) failed; and what still waits in the served queues, for its
run_at or for its dependencies.

The table is the truth a burst's summary and exit code are held to: a poison discard is
decided by the write itself, and a dependent is cancelled by a trigger the supervisor
never hears from. Both queries read only rows finished within ``window`` seconds (the
run's length: ``jobs_finished_idx``), and a discard counts only if its last errors entry
names this supervisor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

DISCARDED = """
SELECT coalesce(j.errors -> -1 ->> 'kind', 'unknown'), count(*)::int
FROM supervisor.jobs j
WHERE j.state = 'discarded' AND j.finished_at >= now() - %(window)s * interval '1 second'
  AND j.errors -> -1 ->> 'supervisor' = %(owner)s
GROUP BY 1
"""

# cancel_dependent (schema 0009) ends a dependent with the entry
# {"kind": "dependency", "message": "dependency <id> ended <state>"}.
CANCELLED_DEPENDENTS = """
WITH RECURSIVE failed AS (
    SELECT j.id, false AS cancelled FROM supervisor.jobs j
    WHERE j.state = 'discarded' AND j.finished_at >= now() - %(window)s * interval '1 second'
      AND j.errors -> -1 ->> 'supervisor' = %(owner)s
  UNION
    SELECT c.id, true FROM supervisor.jobs c
    JOIN failed f
      ON substring(c.errors -> -1 ->> 'message' FROM '^dependency ([0-9]+) ')::bigint = f.id
    WHERE c.state = 'cancelled' AND c.finished_at >= now() - %(window)s * interval '1 second'
      AND c.errors -> -1 ->> 'kind' = 'dependency'
)
SELECT count(*)::int FROM failed WHERE cancelled
"""


# A dependent waits at run_at = shared.batches.HOLD until its dependencies complete.
WAITS = """
SELECT count(*) FILTER (WHERE run_at < %(hold)s::timestamptz)::int,
       count(*) FILTER (WHERE run_at >= %(hold)s::timestamptz)::int,
       extract(epoch FROM min(run_at) FILTER (WHERE run_at < %(hold)s::timestamptz) - now())
FROM supervisor.jobs
WHERE state IN ('scheduled', 'retryable') AND queue = ANY(%(queues)s::text[])
"""


@dataclass(frozen=True, slots=True)
class Waiting:
    """Jobs of some queues that wait: ``timed`` for their run_at (the next due in
    ``next_due_in`` seconds, None when none), ``held`` for their dependencies."""

    timed: int
    held: int
    next_due_in: float | None


def waiting(conn: psycopg.Connection, queues: list[str]) -> Waiting:
    """What waits in ``queues``, and for what."""
    from shared.batches import HOLD

    row = conn.execute(WAITS, {"queues": queues, "hold": HOLD}).fetchone()
    if row is None:
        return Waiting(0, 0, None)
    timed, held, due_in = row
    return Waiting(timed, held, None if due_in is None else float(due_in))


@dataclass(frozen=True, slots=True)
class RunFailures:
    """Jobs a run discarded, by reason (the last errors entry's kind: ``poison``,
    ``error``, ``timeout``, ...), and the dependents cancelled because of them."""

    discarded: dict[str, int] = field(default_factory=dict)
    cancelled: int = 0


def run_failures(conn: psycopg.Connection, owner: str, window: float) -> RunFailures:
    """What ``owner``'s discards came to over the last ``window`` seconds."""
    params = {"owner": owner, "window": window}
    discarded: dict[str, int] = dict(conn.execute(DISCARDED, params).fetchall())
    cancelled = 0
    if discarded:
        row = conn.execute(CANCELLED_DEPENDENTS, params).fetchone()
        cancelled = row[0] if row else 0
    return RunFailures(discarded, cancelled)


def cancelled_dependents(conn: psycopg.Connection, owner: str, window: float) -> int:
    """Only the dependents cancelled because of ``owner``'s discards (for progress)."""
    row = conn.execute(CANCELLED_DEPENDENTS, {"owner": owner, "window": window}).fetchone()
    return row[0] if row else 0

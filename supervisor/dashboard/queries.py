"""What the dashboard reads and changes in the database: plain SQL over the contract
tables (``supervisor.jobs``, ``supervisor.queues``, ``supervisor.supervisors``).

Plain functions over an autocommit psycopg connection, returning plain data. The
operator's queries the CLI runs too (counts per queue, live supervisors, one job,
retry, cancel, pause) come from the admin room (``supervisor.admin``), so the dashboard
and ``supervisor status`` never disagree; the filtered, paged job search is in
``supervisor.dashboard.search``.
"""

from __future__ import annotations

from typing import Any

import psycopg

from supervisor import admin
from supervisor.admin import AdminError
from supervisor.dashboard import search

_JOB_EXISTS = "SELECT 1 FROM supervisor.jobs WHERE id = %(id)s"

# The distinct queues of the jobs by skipping through an index on (state, queue) (where
# the operator created one, docs/dashboard.md: jobs_state_queue_idx), one probe per
# (state, queue) pair present, not a pass over the table. Without such an index each
# probe is a pass of its own: 82 s for 20,000 queues (issue 50), so then one pass
# gathers them all (_QUEUE_NAMES_BY_PASS), as it does when there are few rows per pair.
_QUEUE_NAMES_BY_INDEX = """
WITH RECURSIVE p(state, queue) AS (
    (SELECT state, queue FROM supervisor.jobs ORDER BY state, queue LIMIT 1)
    UNION ALL
    SELECT n.state, n.queue FROM p CROSS JOIN LATERAL (
        SELECT j.state, j.queue FROM supervisor.jobs j
        WHERE (j.state, j.queue) > (p.state, p.queue)
        ORDER BY j.state, j.queue LIMIT 1) AS n
)
SELECT name FROM supervisor.queues
UNION
SELECT queue FROM p
ORDER BY 1
LIMIT %(limit)s
"""
_QUEUE_NAMES_BY_PASS = """
SELECT name FROM supervisor.queues
UNION
SELECT queue FROM supervisor.jobs
ORDER BY 1
LIMIT %(limit)s
"""
# Whether a valid, whole-table index of supervisor.jobs has keys starting with (state,
# queue), and the planner's estimates: rows, distinct queues, distinct states.
_SKIP_INPUTS = """
SELECT EXISTS (
    SELECT 1 FROM pg_index i
    JOIN pg_attribute s ON s.attrelid = i.indrelid AND s.attnum = i.indkey[0]
    JOIN pg_attribute q ON q.attrelid = i.indrelid AND q.attnum = i.indkey[1]
    WHERE i.indrelid = 'supervisor.jobs'::regclass AND i.indisvalid
      AND i.indpred IS NULL AND s.attname = 'state' AND q.attname = 'queue'),
  (SELECT reltuples FROM pg_class WHERE oid = 'supervisor.jobs'::regclass),
  (SELECT n_distinct FROM pg_stats
   WHERE schemaname = 'supervisor' AND tablename = 'jobs' AND attname = 'queue'),
  (SELECT n_distinct FROM pg_stats
   WHERE schemaname = 'supervisor' AND tablename = 'jobs' AND attname = 'state')
"""
# A probe through the index costs about as much as reading this many rows in one pass
# (measured, scripts/bench_dashboard_queues.py: 60,000 probes 1.66 s, 100,000 rows 28 ms).
ROWS_PER_PROBE = 100
QUEUE_CHOICES = 1000  # more queue names than this: the filter is a text box, not a list


class NotFound(AdminError):
    """The job or page asked for does not exist."""


def overview(conn: psycopg.Connection,
             finished: admin.FinishedTally | None = None) -> dict[str, Any]:
    """The queues page: ``supervisor status``'s data (queues with counts by state, rate,
    oldest waiting, paused; live supervisors; unserved and unhandled work) plus
    ``totals``, the counts by state summed over every queue. ``finished``: the finished
    states' counts taken earlier (see ``admin.queue_stats``)."""
    data = admin.status(conn, finished)
    totals: dict[str, int | None] = dict.fromkeys(admin.COUNTED, 0)
    for queue in data["queues"]:
        for state, count in queue["counts"].items():
            total = totals[state]
            # None: the finished states not counted (past their budget), then in total too
            totals[state] = None if total is None or count is None else total + count
    data["totals"] = totals
    return data


def queues(conn: psycopg.Connection,
           finished: admin.FinishedTally | None = None) -> list[dict[str, Any]]:
    """Every queue with its counts by state, rate, oldest waiting job and paused flag."""
    return admin.queue_stats(conn, finished)


def queue_names(conn: psycopg.Connection, limit: int = QUEUE_CHOICES + 1) -> list[str]:
    """The first ``limit`` queue names, sorted, of those that have jobs or a row in
    ``supervisor.queues``: by skipping through an index on (state, queue) when there is
    one and the table has many rows per (state, queue) pair, else in one pass."""
    row = conn.execute(_SKIP_INPUTS).fetchone()
    query = _QUEUE_NAMES_BY_INDEX if row and _skip_pays(*row) else _QUEUE_NAMES_BY_PASS
    return [row[0] for row in conn.execute(query, {"limit": limit})]


def _skip_pays(indexed: bool, rows: float | None, queues: float | None,
               states: float | None) -> bool:
    """Whether skipping through the (state, queue) index probes fewer times than a pass
    reads rows, by the planner's estimates (no estimates yet: a pass)."""
    if not indexed or not rows or rows <= 0 or queues is None or states is None:
        return False

    def distinct(estimate: float) -> float:  # negative: a fraction of the rows
        return -estimate * rows if estimate < 0 else estimate

    return distinct(queues) * distinct(states) * ROWS_PER_PROBE < rows


def supervisors(conn: psycopg.Connection) -> dict[str, Any]:
    """Live supervisors (host, pid, children, busy, queues, heartbeat age, uptime) and
    how many registered ones have stopped beating. Reads only the supervisors table."""
    live = [admin.public_supervisor(sup) for sup in admin.live_supervisors(conn)]
    return {"supervisors": live, "stale": admin.stale_supervisors(conn)}


def parse_filters(params: dict[str, str]) -> dict[str, Any]:
    """The job list's filters (see ``search.parse_filters``)."""
    return search.parse_filters(params)


def jobs(conn: psycopg.Connection, filters: dict[str, Any]) -> dict[str, Any]:
    """One page of jobs matching ``filters`` (see ``search.jobs``)."""
    return search.jobs(conn, filters)


def job(conn: psycopg.Connection, job_id: int) -> dict[str, Any]:
    """Every column of one job (args, result, progress, errors with tracebacks);
    ``NotFound`` when there is none."""
    try:
        return admin.get_job(conn, job_id)
    except AdminError as exc:
        raise NotFound(str(exc)) from None


def retry(conn: psycopg.Connection, job_id: int) -> str:
    """Retry one discarded, cancelled or retryable job now; returns its former state."""
    return _acting_on(conn, job_id, admin.retry_job)


def cancel(conn: psycopg.Connection, job_id: int) -> str:
    """Cancel one unfinished job (a running one's supervisor kills it); returns its
    former state."""
    return _acting_on(conn, job_id, admin.cancel_job)


def _acting_on(conn: psycopg.Connection, job_id: int, action) -> str:
    try:
        return action(conn, job_id)
    except AdminError as exc:
        # The admin functions say "no job" and "wrong state" alike; the dashboard
        # answers 404 for one and 409 for the other.
        if conn.execute(_JOB_EXISTS, {"id": job_id}).fetchone() is None:
            raise NotFound(str(exc)) from None
        raise


def set_paused(conn: psycopg.Connection, name: str, paused: bool,
               stop_running: bool = False) -> dict[str, Any]:
    """Pause or resume queue ``name``: ``{name, paused, was_paused, available, running,
    stop_running}`` (``stop_running``: its running jobs are stopped too)."""
    return admin.set_paused(conn, name, paused, stop_running=stop_running)

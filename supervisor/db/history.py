"""The per-minute history of finished jobs (``supervisor.job_minutes``), rolled up by
the maintenance leader: one short transaction a round reads the jobs finished in the minutes
closed since ``supervisor.rollup_mark`` through the finished index, adds one row per
minute, queue and kind (with the CPU seconds and peak memory of their last attempts'
``usage``), moves the mark and drops rows older than the retention.

Only time up to a minute that closed ``LAG`` seconds ago is rolled, so a job whose
transaction commits a little after its ``finished_at`` is still counted; at most
``SLICE`` seconds of it per round, so each round's work stays small (a minute is then
rolled in pieces, added up; its p95 is the largest of its pieces'); the mark row is
taken with SKIP LOCKED, so two supervisors leading one after the other never count a
job twice. The cost grows with the jobs finished per round, not with the table.

Beside it, ``sample_depth`` records each queue's depth once a minute
(``supervisor.queue_minutes``): the available and running jobs and the oldest wait,
one count over the state index's live part, skipped when this minute has its sample.
"""

from __future__ import annotations

import psycopg

from shared.usage_sql import in_range, usage_figure, usage_number

LAG = 30.0  # seconds after a minute closes before it is rolled
KEEP = 30 * 86400.0  # seconds of history kept
# Seconds of finished jobs one round rolls at most (three times the maintenance
# interval: it catches up after a pause), so a round's work stays small and even
# instead of a whole minute's jobs, or a day's after an outage, at once.
SLICE = 15.0

# The mark, locked: where the last roll-up stopped, and where this one stops.
_SPAN = """
SELECT s.since,
       least(greatest(s.since, date_trunc('minute', now() - %(lag)s * interval '1 second')),
             s.since + %(slice)s * interval '1 second')
FROM (SELECT greatest(rolled_until, now() - %(keep)s * interval '1 second') AS since
      FROM supervisor.rollup_mark FOR UPDATE SKIP LOCKED) AS s
"""

# The jobs finished in [since, upto) through jobs_finished_idx, one row per minute,
# queue and kind. Added to, not replaced, so a late row is counted once all the same.
# The jobs' usage is read with the plain cast and only measures kept: a figure that is
# not a number (a row written by hand) fails the cast, and that slice is rolled again
# with the careful reading (_ADD_GUARDED), which would cost 2.5 µs a job more every time.
_ADD_TEMPLATE = """
WITH finished AS (
    SELECT date_trunc('minute', finished_at) AS minute, queue, kind, state, attempt,
           -- A job may start a hair before its run_at (claimed as it came due).
           CASE WHEN attempted_at IS NOT NULL
                THEN greatest(extract(epoch FROM attempted_at - run_at)::float8, 0) END AS wait,
           CASE WHEN attempted_at IS NOT NULL
                THEN greatest(extract(epoch FROM finished_at - attempted_at)::float8, 0)
           END AS run,
           {cpu} AS cpu, {rss} AS rss
    FROM supervisor.jobs
    WHERE state IN ('completed', 'discarded', 'cancelled')
      AND finished_at >= %(since)s AND finished_at < %(upto)s
)
INSERT INTO supervisor.job_minutes AS m (minute, queue, kind, completed, discarded,
    cancelled, retried, wait_sum, wait_n, wait_p95, run_sum, run_n, run_p95,
    cpu_seconds, max_rss_bytes)
SELECT minute, queue, kind,
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'discarded'),
       count(*) FILTER (WHERE state = 'cancelled'),
       coalesce(sum(greatest(attempt - 1, 0)), 0),
       coalesce(sum(wait), 0), count(wait),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY wait),
       coalesce(sum(run), 0), count(run),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY run),
       sum(cpu) FILTER (WHERE {cpu_ok}), (max(rss) FILTER (WHERE {rss_ok}))::bigint
FROM finished GROUP BY minute, queue, kind
ON CONFLICT (minute, queue, kind) DO UPDATE SET
    completed = m.completed + EXCLUDED.completed,
    discarded = m.discarded + EXCLUDED.discarded,
    cancelled = m.cancelled + EXCLUDED.cancelled,
    retried = m.retried + EXCLUDED.retried,
    wait_sum = m.wait_sum + EXCLUDED.wait_sum, wait_n = m.wait_n + EXCLUDED.wait_n,
    wait_p95 = greatest(m.wait_p95, EXCLUDED.wait_p95),
    run_sum = m.run_sum + EXCLUDED.run_sum, run_n = m.run_n + EXCLUDED.run_n,
    run_p95 = greatest(m.run_p95, EXCLUDED.run_p95),
    -- NULL (no usage) stays NULL until a piece of the minute brings one.
    cpu_seconds = coalesce(m.cpu_seconds + EXCLUDED.cpu_seconds, m.cpu_seconds,
                           EXCLUDED.cpu_seconds),
    max_rss_bytes = greatest(m.max_rss_bytes, EXCLUDED.max_rss_bytes)
"""

_ADD = _ADD_TEMPLATE.format(cpu=usage_figure("cpu_seconds"), rss=usage_figure("max_rss_bytes"),
                            cpu_ok=in_range("cpu"), rss_ok=in_range("rss"))
_ADD_GUARDED = _ADD_TEMPLATE.format(cpu=usage_number("cpu_seconds"),
                                    rss=usage_number("max_rss_bytes"),
                                    cpu_ok=in_range("cpu"), rss_ok=in_range("rss"))

_MOVE = "UPDATE supervisor.rollup_mark SET rolled_until = %(upto)s"
_DROP = "DELETE FROM supervisor.job_minutes WHERE minute < now() - %(keep)s * interval '1 second'"


def roll_up(conn: psycopg.Connection, lag: float = LAG, keep: float = KEEP,
            slice_seconds: float = SLICE) -> int:
    """Add at most ``slice_seconds`` of the time not rolled yet, up to the minute that
    closed ``lag`` seconds ago, move the mark, drop minutes older than ``keep``
    seconds; returns the (minute, queue, kind) rows written or added to (0 when another
    supervisor is rolling up right now). ``conn`` is in autocommit mode; this is one
    transaction."""
    with conn.transaction():
        span = conn.execute(_SPAN, {"lag": lag, "keep": keep,
                                    "slice": slice_seconds}).fetchone()
        if span is None or span[1] <= span[0]:
            return 0
        written = _add(conn, {"since": span[0], "upto": span[1]})
        conn.execute(_MOVE, {"upto": span[1]})
        conn.execute(_DROP, {"keep": keep})
    return max(written, 0)


def _add(conn: psycopg.Connection, span: dict[str, object]) -> int:
    try:
        with conn.transaction():  # a savepoint: the guarded statement runs after it
            return conn.execute(_ADD, span).rowcount
    except psycopg.errors.DataError:
        return conn.execute(_ADD_GUARDED, span).rowcount


# One sample a minute: the NOT EXISTS is a one-time filter, so a round whose minute has
# its sample already reads one key of queue_minutes and no job.
_SAMPLE = """
INSERT INTO supervisor.queue_minutes (minute, queue, available, running, oldest_wait)
SELECT date_trunc('minute', now()), queue,
       count(*) FILTER (WHERE state = 'available'),
       count(*) FILTER (WHERE state = 'running'),
       greatest(extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'available')),
                0)::float8
FROM supervisor.jobs
WHERE state IN ('available', 'running')
  AND NOT EXISTS (SELECT 1 FROM supervisor.queue_minutes
                  WHERE minute = date_trunc('minute', now()))
GROUP BY queue
ON CONFLICT (minute, queue) DO NOTHING
"""
_DROP_SAMPLES = """
DELETE FROM supervisor.queue_minutes WHERE minute < now() - %(keep)s * interval '1 second'
"""


# The count runs in the leader's loop: it may hold it this long, no longer. Counting
# 600,000 waiting jobs took 218 ms on the loaded test machine; a backlog too big to
# count in time is not sampled that minute (the chart shows a gap), rather than
# stalling the leader's claims once a minute for seconds.
SAMPLE_TIMEOUT_MS = 250


def sample_depth(conn: psycopg.Connection, keep: float = KEEP,
                 timeout_ms: int = SAMPLE_TIMEOUT_MS) -> int:
    """Record each queue's depth for this minute unless it is recorded already, drop
    samples older than ``keep`` seconds; returns the queues sampled (0 when this
    minute had its sample, or when counting took longer than ``timeout_ms``)."""
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL statement_timeout = {int(timeout_ms)}")
            written = conn.execute(_SAMPLE).rowcount
            if written > 0:
                conn.execute(_DROP_SAMPLES, {"keep": keep})
    except psycopg.errors.QueryCanceled:
        return 0
    return max(written, 0)

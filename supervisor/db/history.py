"""The per-minute history of finished jobs (``supervisor.job_minutes``), rolled up by
the maintenance leader: one statement a round (``ROLL_UP``) reads the jobs finished in
the minutes closed since ``supervisor.rollup_mark`` through the finished index, adds one
row per minute, queue and kind (with the CPU seconds and peak memory of their last
attempts' ``usage``), moves the mark and drops rows older than the retention.

Only time up to a minute that closed ``LAG`` seconds ago is rolled, so a job whose
transaction commits a little after its ``finished_at`` is still counted; at most
``SLICE`` seconds of it per round, so each round's work stays small (a minute is then
rolled in pieces, added up; its p95 is the largest of its pieces'); the mark row is
taken with SKIP LOCKED, so two supervisors leading one after the other never count a
job twice. The cost grows with the jobs finished per round, not with the table: about
2 µs of the database's CPU per job (0.2-0.4 s for a 15 s slice of a 7,000 jobs/s drain).

Beside it, ``SAMPLE`` records each queue's depth once a minute
(``supervisor.queue_minutes``): the available and running jobs and the oldest wait,
one count over the partial indexes of available and running jobs, skipped when this
minute has its sample.

The supervisor sends both without waiting, on a connection of their own
(``supervisor.db.history_writer``): each is one statement, so it commits whole or not
at all whenever its answer is read, or if nobody reads it. ``roll_up`` and
``sample_depth`` run them blocking, for scripts and tests.
"""

from __future__ import annotations

import psycopg

from shared.live_sql import live_jobs
from shared.usage_sql import in_range, usage_figure, usage_number

LAG = 30.0  # seconds after a minute closes before it is rolled
KEEP = 30 * 86400.0  # seconds of history kept
# Seconds of finished jobs one round rolls at most (three times the maintenance
# interval: it catches up after a pause), so a round's work stays small and even
# instead of a whole minute's jobs, or a day's after an outage, at once.
SLICE = 15.0

# One statement, so the loop can send it and read its answer later (``history_writer``)
# and a statement that fails or is abandoned changes nothing: the mark moves with the
# rows it rolled, or neither does.
#
# span: the mark, locked (SKIP LOCKED: a supervisor rolling up right now keeps it, and
# this statement then does nothing); where the last roll-up stopped and where this one
# stops. LIMIT 1 tells the planner it is one row (the table is never analyzed: it took
# 2,200, estimated the statement at millions of rows and JIT-compiled it, 0.7 s of CPU
# a round).
# finished: the jobs finished in [since, upto) through jobs_finished_idx.
# added: one row per minute, queue and kind, added to, not replaced, so a late row is
# counted once all the same.
# moved: the mark, and dropped: minutes older than the retention (only before the
# oldest minute this statement may add to: one statement never touches a row twice).
# A kind is keyed by supervisor.short_name (0022): a kind stored before the length
# CHECK, longer than job_minutes' key can take, is rolled up under its shortened name
# instead of failing every round.
# The jobs' usage is read with the plain cast and only measures kept: a figure that is
# not a number (a row written by hand) fails the cast, and the statement is run again
# with the careful reading (ROLL_UP_GUARDED), which would cost 2.5 µs a job more every
# time.
_ROLL_UP_TEMPLATE = """
WITH span AS MATERIALIZED (
    SELECT s.since,
           least(greatest(s.since,
                          date_trunc('minute', now() - %(lag)s * interval '1 second')),
                 s.since + %(slice)s * interval '1 second') AS upto
    FROM (SELECT greatest(rolled_until, now() - %(keep)s * interval '1 second') AS since
          FROM supervisor.rollup_mark LIMIT 1 FOR UPDATE SKIP LOCKED) AS s
), finished AS (
    SELECT date_trunc('minute', j.finished_at) AS minute, j.queue,
           supervisor.short_name(j.kind) AS kind, j.state,
           j.attempt,
           -- A job may start a hair before its run_at (claimed as it came due).
           CASE WHEN j.attempted_at IS NOT NULL
                THEN greatest(extract(epoch FROM j.attempted_at - j.run_at)::float8, 0)
           END AS wait,
           CASE WHEN j.attempted_at IS NOT NULL
                THEN greatest(extract(epoch FROM j.finished_at - j.attempted_at)::float8, 0)
           END AS run,
           {cpu} AS cpu, {rss} AS rss
    FROM span JOIN supervisor.jobs j
      ON j.finished_at >= span.since AND j.finished_at < span.upto
    WHERE j.state IN ('completed', 'discarded', 'cancelled')
), added AS (
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
    RETURNING 1
), moved AS (
    UPDATE supervisor.rollup_mark SET rolled_until = span.upto
    FROM span WHERE span.upto > span.since
    RETURNING 1
), dropped AS (
    DELETE FROM supervisor.job_minutes
    WHERE minute < date_trunc('minute', now() - %(keep)s * interval '1 second')
      AND EXISTS (SELECT 1 FROM moved)
)
SELECT (SELECT count(*) FROM added) AS written
"""

ROLL_UP = _ROLL_UP_TEMPLATE.format(
    cpu=usage_figure("cpu_seconds", "j.usage"), rss=usage_figure("max_rss_bytes", "j.usage"),
    cpu_ok=in_range("cpu"), rss_ok=in_range("rss"))
ROLL_UP_GUARDED = _ROLL_UP_TEMPLATE.format(
    cpu=usage_number("cpu_seconds", "j.usage"), rss=usage_number("max_rss_bytes", "j.usage"),
    cpu_ok=in_range("cpu"), rss_ok=in_range("rss"))


def roll_up_params(lag: float = LAG, keep: float = KEEP,
                   slice_seconds: float = SLICE) -> dict[str, float]:
    """The parameters of ``ROLL_UP`` (see ``roll_up``)."""
    return {"lag": lag, "keep": keep, "slice": slice_seconds}


def roll_up(conn: psycopg.Connection, lag: float = LAG, keep: float = KEEP,
            slice_seconds: float = SLICE) -> int:
    """Add at most ``slice_seconds`` of the time not rolled yet, up to the minute that
    closed ``lag`` seconds ago, move the mark, drop minutes older than ``keep``
    seconds; returns the (minute, queue, kind) rows written or added to (0 when another
    supervisor is rolling up right now). Blocking, on an autocommit ``conn``: for
    scripts and tests; the supervisor sends the same statement without waiting
    (``supervisor.db.history_writer``)."""
    params = roll_up_params(lag, keep, slice_seconds)
    try:
        row = conn.execute(ROLL_UP, params).fetchone()
    except psycopg.errors.DataError:
        row = conn.execute(ROLL_UP_GUARDED, params).fetchone()
    return int(row[0]) if row else 0


# One sample a minute, one statement (as the roll-up): the NOT EXISTS is a one-time
# filter, so a round whose minute has its sample already reads one key of queue_minutes
# and no job; samples older than the retention go when a new one is taken. Available
# and running jobs are read through their partial indexes (``shared.live_sql``): as one
# ``state IN``, the count read the whole table, and once days of finished jobs made that
# longer than its timeout, no minute was sampled.
SAMPLE = f"""
WITH live AS (
    {live_jobs("queue, state, run_at", ("available", "running"))}
), sampled AS (
    INSERT INTO supervisor.queue_minutes (minute, queue, available, running, oldest_wait)
    SELECT date_trunc('minute', now()), queue,
           count(*) FILTER (WHERE state = 'available'),
           count(*) FILTER (WHERE state = 'running'),
           greatest(extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'available')),
                    0)::float8
    FROM live
    WHERE NOT EXISTS (SELECT 1 FROM supervisor.queue_minutes
                      WHERE minute = date_trunc('minute', now()))
    GROUP BY queue
    ON CONFLICT (minute, queue) DO NOTHING
    RETURNING 1
), dropped AS (
    DELETE FROM supervisor.queue_minutes
    WHERE minute < now() - %(keep)s * interval '1 second' AND EXISTS (SELECT 1 FROM sampled)
)
SELECT count(*) AS sampled FROM sampled
"""


# Counting is bounded: counting 600,000 waiting jobs took 218 ms on the loaded test
# machine, and the count grows with the backlog, not with the work done; a backlog too
# big to count in time is not sampled that minute (the chart shows a gap) rather than
# costing the database seconds of CPU a minute. (The count no longer runs in the
# leader's loop: ``history_writer`` sends it on a connection of its own.)
SAMPLE_TIMEOUT_MS = 250


def sample_depth(conn: psycopg.Connection, keep: float = KEEP,
                 timeout_ms: int = SAMPLE_TIMEOUT_MS) -> int:
    """Record each queue's depth for this minute unless it is recorded already, drop
    samples older than ``keep`` seconds; returns the queues sampled (0 when this
    minute had its sample, or when counting took longer than ``timeout_ms``).
    Blocking, on an autocommit ``conn``: for scripts and tests (the supervisor sends
    ``SAMPLE`` without waiting, ``supervisor.db.history_writer``)."""
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL statement_timeout = {int(timeout_ms)}")
            row = conn.execute(SAMPLE, {"keep": keep}).fetchone()
    except psycopg.errors.QueryCanceled:
        return 0
    return int(row[0]) if row else 0

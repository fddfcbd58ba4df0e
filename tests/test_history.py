"""The per-minute history of finished jobs: after a real supervisor run with
completions, failures, retries and a discard, the rolled-up minutes agree with the jobs
table, a second roll-up adds nothing, only closed minutes are rolled, and old minutes
are dropped."""

from __future__ import annotations

import time

import pytest
from e2e import run_burst
from history_helpers import roll_up_to_now

from shared.enqueue import enqueue_many
from supervisor.db.history import KEEP, roll_up

pytestmark = pytest.mark.timeout(120)

_TABLE = """
SELECT date_trunc('minute', finished_at) AS minute, queue, kind,
       count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'discarded'),
       count(*) FILTER (WHERE state = 'cancelled'), sum(greatest(attempt - 1, 0)),
       count(attempted_at)
FROM supervisor.jobs WHERE state IN ('completed', 'discarded', 'cancelled')
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
"""
_ROLLED = """
SELECT minute, queue, kind, sum(completed), sum(discarded), sum(cancelled), sum(retried),
       sum(run_n)
FROM supervisor.job_minutes GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
"""
# What the rolled-up jobs cost: their last attempts' CPU seconds added up and the
# largest peak memory, per minute, queue and kind, beside the same from the rollup.
_USAGE_TABLE = """
SELECT date_trunc('minute', finished_at) AS minute, queue, kind,
       sum((usage->>'cpu_seconds')::float8), max((usage->>'max_rss_bytes')::bigint),
       count(usage)
FROM supervisor.jobs WHERE state IN ('completed', 'discarded', 'cancelled')
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
"""
_USAGE_ROLLED = """
SELECT minute, queue, kind, cpu_seconds, max_rss_bytes
FROM supervisor.job_minutes ORDER BY 1, 2, 3
"""


@pytest.mark.slow
def test_the_rollup_agrees_with_the_jobs_after_failures_and_retries(dsn, conn):
    conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = now() - interval '1 hour'")
    enqueue_many("e2e_noop", [{"n": i} for i in range(40)], conn=conn)
    enqueue_many("e2e_quick_backoff", [{}] * 6, conn=conn)  # 3 attempts 0.2 s apart
    enqueue_many("e2e_discard", [{}] * 3, conn=conn)
    # A cancelled job whose attempt was measured: its cost is rolled up with the rest
    # (and makes the sum surely non-zero, whatever the clock ticks gave the noops).
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, finished_at, usage) "
                 "VALUES ('e2e_noop', 'default', 'cancelled', now(), '{\"cpu_seconds\": "
                 "1.25, \"wall_seconds\": 2, \"max_rss_bytes\": 4000000000}')")
    for _ in range(10):  # a burst ends when nothing is due: run again for the retries
        run_burst(dsn, "--app", "e2e_handlers", "-n", "2", timeout=90)
        if not conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state NOT IN "
                            "('completed', 'discarded', 'cancelled')").fetchone()[0]:
            break
        time.sleep(0.3)  # the next retry's backoff
    table = conn.execute(_TABLE).fetchall()
    assert sum(row[4] for row in table) == 9  # six failed three times, three discarded
    assert sum(row[6] for row in table) == 12  # the retries spent
    roll_up_to_now(conn)
    assert conn.execute(_ROLLED).fetchall() == table
    assert roll_up(conn, lag=-120, slice_seconds=3600) == 0  # nothing new: nothing added
    assert conn.execute(_ROLLED).fetchall() == table
    # The cost: each minute's CPU seconds are its jobs' sum (pieces of a minute added
    # up), its peak the largest of its jobs'; NULL exactly where no job was measured.
    usage = conn.execute(_USAGE_TABLE).fetchall()
    assert sum(row[5] for row in usage) >= 40, usage  # the supervisor measured the runs
    rolled = conn.execute(_USAGE_ROLLED).fetchall()
    assert [row[:3] for row in rolled] == [row[:3] for row in usage]
    for (*key, cpu, peak, measured), (*_same, rolled_cpu, rolled_peak) in zip(
            usage, rolled, strict=True):
        if not measured:
            assert (rolled_cpu, rolled_peak) == (None, None), key
            continue
        assert rolled_cpu == pytest.approx(cpu, rel=1e-9, abs=1e-9), key
        assert rolled_peak == peak, key
    total = conn.execute("SELECT sum((usage->>'cpu_seconds')::float8) FROM supervisor.jobs "
                         "WHERE state IN ('completed', 'discarded', 'cancelled')").fetchone()[0]
    assert total >= 1.25
    assert conn.execute("SELECT sum(cpu_seconds) FROM supervisor.job_minutes"
                        ).fetchone()[0] == pytest.approx(total, rel=1e-9)
    assert conn.execute("SELECT max(max_rss_bytes) FROM supervisor.job_minutes"
                        ).fetchone()[0] == 4_000_000_000
    waits = conn.execute("SELECT sum(wait_sum), sum(run_sum), max(run_p95) "
                         "FROM supervisor.job_minutes").fetchone()
    # Times come only from jobs whose start was marked (attempted_at): a job that ends
    # before its start mark is written has none, so they may all be missing here.
    assert all(v is None or v >= 0 for v in waits), waits


def test_only_closed_minutes_are_rolled_and_old_ones_dropped(conn):
    conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = "
                 "date_trunc('minute', now()) - interval '10 minutes'")
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, attempt, attempted_at, "
                 "finished_at) VALUES "
                 "('k', 'q', 'completed', 1, now() - interval '5 minutes 2 seconds', "
                 " now() - interval '5 minutes'), "
                 "('k', 'q', 'completed', 1, now(), now())")  # this minute: not yet
    conn.execute("INSERT INTO supervisor.job_minutes (minute, queue, kind, completed) "
                 "VALUES (now() - %s * interval '1 second' - interval '1 hour', 'q', 'k', 7)",
                 (KEEP,))
    assert roll_up(conn) == 0  # at most 15 s a round: the first slice is empty
    assert roll_up(conn, slice_seconds=3600) == 1
    rows = conn.execute("SELECT completed, run_n FROM supervisor.job_minutes").fetchall()
    assert rows == [(1, 1)]  # the old minute dropped, the open one left for later
    mark = conn.execute("SELECT rolled_until <= now() - interval '30 seconds' "
                        "FROM supervisor.rollup_mark").fetchone()[0]
    assert mark


def test_a_usage_that_is_not_a_measure_is_left_out_and_the_rollup_goes_on(conn):
    """Rows written by hand may carry anything in ``usage``: a string for a number, an
    array, a number past float8, a negative one. The rollup counts those jobs but not
    their "cost", and never fails (a failing roll-up would never move its mark)."""
    conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = "
                 "date_trunc('minute', now()) - interval '10 minutes'")
    conn.execute("""
        INSERT INTO supervisor.jobs (kind, queue, state, attempt, finished_at, usage)
        SELECT 'k', 'q', 'completed', 1, date_trunc('minute', now()) - interval '5 minutes',
               u::jsonb
        FROM unnest(ARRAY[
            '{"cpu_seconds": "lots", "max_rss_bytes": "much"}',
            '[1, 2, 3]', '"a string"', 'null',
            '{"cpu_seconds": 1e400, "max_rss_bytes": 1e30}',
            '{"cpu_seconds": -5, "max_rss_bytes": -1}',
            '{"cpu_seconds": 0.5, "max_rss_bytes": 1048576}',
            '{"cpu_seconds": 0.25}']) AS u""")
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, attempt, finished_at) "
                 "VALUES ('bare', 'q', 'completed', 1, "
                 "date_trunc('minute', now()) - interval '5 minutes')")
    # Another minute, rolled in a slice of its own, whose figures all are numbers, some
    # of them not measures: the plain cast reads them (no fallback needed) and the range
    # leaves those out just the same.
    conn.execute("""
        INSERT INTO supervisor.jobs (kind, queue, state, attempt, finished_at, usage)
        SELECT 'n', 'q', 'completed', 1, date_trunc('minute', now()) - interval '3 minutes',
               u::jsonb
        FROM unnest(ARRAY['{"cpu_seconds": -5, "max_rss_bytes": 1e30}',
                          '{"cpu_seconds": 2e15, "max_rss_bytes": -1}',
                          '{"cpu_seconds": 2, "max_rss_bytes": 2048}']) AS u""")
    assert roll_up(conn, slice_seconds=360) == 2  # up to 4 minutes ago: k and bare
    assert roll_up(conn, slice_seconds=3600) == 1  # then n
    rows = conn.execute("SELECT kind, completed, cpu_seconds, max_rss_bytes "
                        "FROM supervisor.job_minutes ORDER BY kind").fetchall()
    # Only the real measures count; a kind with no usage at all has NULL, not 0.
    assert rows == [("bare", 1, None, None), ("k", 8, 0.75, 1048576), ("n", 3, 2.0, 2048)]
    mark = conn.execute("SELECT rolled_until >= date_trunc('minute', now()) - "
                        "interval '1 minute' FROM supervisor.rollup_mark").fetchone()[0]
    assert mark  # it moved past them

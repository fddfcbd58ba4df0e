"""The per-minute history of finished jobs: after a real supervisor run with
completions, failures, retries and a discard, the rolled-up minutes agree with the jobs
table, a second roll-up adds nothing, only closed minutes are rolled, and old minutes
are dropped."""

from __future__ import annotations

import time

import pytest
from e2e import run_burst

from shared.enqueue import enqueue_many
from supervisor.db import Store
from supervisor.db.history import KEEP

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


@pytest.mark.slow
def test_the_rollup_agrees_with_the_jobs_after_failures_and_retries(dsn, conn):
    conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = now() - interval '1 hour'")
    enqueue_many("e2e_noop", [{"n": i} for i in range(40)], conn=conn)
    enqueue_many("e2e_quick_backoff", [{}] * 6, conn=conn)  # 3 attempts 0.2 s apart
    enqueue_many("e2e_discard", [{}] * 3, conn=conn)
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, finished_at) "
                 "VALUES ('e2e_noop', 'default', 'cancelled', now())")
    for _ in range(10):  # a burst ends when nothing is due: run again for the retries
        run_burst(dsn, "--app", "e2e_handlers", "-n", "2", timeout=90)
        if not conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state NOT IN "
                            "('completed', 'discarded', 'cancelled')").fetchone()[0]:
            break
        time.sleep(0.3)  # the next retry's backoff
    table = conn.execute(_TABLE).fetchall()
    assert sum(row[4] for row in table) == 9  # six failed three times, three discarded
    assert sum(row[6] for row in table) == 12  # the retries spent
    store = Store(conn, "test")
    # Every minute up to the next one counts as closed for this test; 15 s slices, as a
    # leader's rounds would roll them, until the mark has caught up.
    while store.roll_up(lag=-120) or conn.execute(
            "SELECT rolled_until < date_trunc('minute', now() + interval '2 minutes') "
            "FROM supervisor.rollup_mark").fetchone()[0]:
        pass
    assert conn.execute(_ROLLED).fetchall() == table
    assert store.roll_up(lag=-120, slice_seconds=3600) == 0  # nothing new: nothing added
    assert conn.execute(_ROLLED).fetchall() == table
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
    store = Store(conn, "test")
    assert store.roll_up() == 0  # at most 15 s a round: the first slice is empty
    assert store.roll_up(slice_seconds=3600) == 1
    rows = conn.execute("SELECT completed, run_n FROM supervisor.job_minutes").fetchall()
    assert rows == [(1, 1)]  # the old minute dropped, the open one left for later
    mark = conn.execute("SELECT rolled_until <= now() - interval '30 seconds' "
                        "FROM supervisor.rollup_mark").fetchone()[0]
    assert mark

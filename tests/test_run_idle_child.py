"""An idle child never waits while a job it may run is available (issue 49).

At ``-n 2`` a child stuck on a long job of a kind not measured yet counts as overrunning
after ``MIN_OVERRUN`` and is left out of the claim's pool size; its job was still
counted against its queue, so the one free child's allotment looked full and the queue's
new jobs waited in the table until the long job ended. These tests hold a long job
running (it waits for a file the test creates only at the end) and check that short jobs
enqueued meanwhile run on the other children: without the fix they never complete while
the long job runs, so the wait below times out.
"""

import time

import psycopg
import pytest
from e2e import Supervisor, wait_until

from shared.enqueue import enqueue, enqueue_many

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]  # real supervisors: CI lane


def _state(dsn: str, job_id: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s",
                           (job_id,)).fetchone()
        return row[0] if row else ""


def _completed(dsn: str, ids: list[int]) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) "
                            "AND state = 'completed'", (ids,)).fetchone()[0]


@pytest.mark.parametrize("children", [2, 3, 4])
@pytest.mark.parametrize("history", ["cold", "warm", "other-kind"])
def test_short_jobs_run_beside_a_long_one(dsn, tmp_path, children, history):
    release = tmp_path / "release"
    done_already = tmp_path / "done-already"
    done_already.touch()
    sup = Supervisor(dsn, "-n", str(children), "-q", "default")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            if history == "warm":  # the kind has a measured run time (a short one)
                warm = enqueue("e2e_wait_for", {"path": str(done_already)}, conn=conn)
                wait_until(lambda: _state(dsn, warm) == "completed", timeout=30,
                           what="the warming job")
            long_job = enqueue("e2e_wait_for", {"path": str(release), "timeout": 60},
                               conn=conn)
        wait_until(lambda: _state(dsn, long_job) == "running", timeout=30,
                   what="the long job to start")
        # Past the overrun threshold of an unmeasured kind (MIN_OVERRUN, 50 ms), where
        # the child counted as stuck and the claim saw no room: a deliberate delay, not
        # a synchronisation.
        time.sleep(0.5)
        with psycopg.connect(dsn, autocommit=True) as conn:
            if history == "other-kind":
                short = enqueue_many("e2e_noop", [{"n": i} for i in range(4)], conn=conn)
            else:
                short = enqueue_many("e2e_wait_for",
                                     [{"path": str(done_already)} for _ in range(4)],
                                     conn=conn)
        wait_until(lambda: _completed(dsn, short) == 4, timeout=30,
                   what="the short jobs, while the long one runs")
        assert _state(dsn, long_job) == "running"  # they ran beside it, not after it
        release.touch()
        wait_until(lambda: _state(dsn, long_job) == "completed", timeout=30,
                   what="the long job")
    finally:
        release.touch()
        sup.stop()

"""The allotment's promise with prefetch (issue 44): a queue's share from its first job,
``min_workers`` within one job-length, whatever the other queue holds in its pipes.

Before the fix, two children made idle in one turn were both given the first queue (its
jobs were counted once started, and their STARTs were not back yet), and a queue owed a
child while every child was busy waited behind the jobs prefetched in every pipe.
"""

import time

import psycopg
import pytest
from e2e import Supervisor, read_log, run_burst, wait_until

from shared.enqueue import enqueue_many

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # real supervisors: CI lane


def _starts(log, queue):
    return sorted(r["t"] for r in read_log(log) if r["event"] == "start"
                  and r["queue"] == queue)


def test_equal_weights_share_from_the_first_job_with_prefetch(dsn, tmp_path):
    log = tmp_path / "runs.log"
    config = tmp_path / "supervisor.toml"
    config.write_text("[queues.weighted_a]\nweight = 1\n[queues.weighted_b]\nweight = 1\n")
    enqueue_many("e2e_work_a", [{"seconds": 0.5}] * 24, queue="weighted_a", dsn=dsn)
    enqueue_many("e2e_work_b", [{"seconds": 0.5}] * 6, queue="weighted_b", dsn=dsn)
    run_burst(dsn, "-n", "2", "--prefetch", "4", "--config", str(config), log_path=log,
              timeout=90)
    big, small = _starts(log, "weighted_a"), _starts(log, "weighted_b")
    first = min(big[0], small[0])
    # Each queue is owed one child from the start: small's jobs run back to back on it,
    # the first among the first two starts, the sixth five job-lengths later.
    assert small[0] <= sorted(big + small)[1], (big[:4], small)
    assert small[-1] - first <= 3.0, [round(t - first, 2) for t in small]


@pytest.mark.parametrize("prefetch", [None, "4"])
def test_min_workers_queue_gets_its_children_within_a_job_length(dsn, tmp_path, prefetch):
    log = tmp_path / "runs.log"
    config = tmp_path / "supervisor.toml"
    config.write_text("[queues.weighted_a]\nweight = 10\n"
                      "[queues.weighted_b]\nweight = 1\nmin_workers = 2\n")
    enqueue_many("e2e_work_a", [{"seconds": 1.0}] * 60, queue="weighted_a", dsn=dsn)
    extra = ["--prefetch", prefetch] if prefetch else []
    sup = Supervisor(dsn, "-n", "4", "--config", str(config), "-q", "weighted_a",
                     "-q", "weighted_b", *extra, log_path=log)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_until(lambda: conn.execute(
                "SELECT count(*) FROM supervisor.jobs WHERE state = 'running'"
            ).fetchone()[0] >= 4, timeout=30, what="the heavy queue on every child")
            # Into the heavy jobs' second round, so every pipe holds prefetched ones: a
            # deliberate offset, not a synchronisation.
            time.sleep(1.3)
            with conn.transaction():
                enqueue_many("e2e_work_b", [{"seconds": 1.0}] * 6, queue="weighted_b",
                             conn=conn)
            (committed,) = conn.execute("SELECT extract(epoch FROM clock_timestamp())"
                                        ).fetchone()
        wait_until(lambda: len(_starts(log, "weighted_b")) >= 2, timeout=30,
                   what="two light jobs running")
        second = _starts(log, "weighted_b")[1]
        # min_workers = 2 within one heavy job-length (1 s) of the commit, plus margin.
        assert second - float(committed) <= 1.3, second - float(committed)
    finally:
        sup.stop()

"""Queued is not started: jobs a supervisor claimed but had not started go back without
spending an attempt when it is SIGKILLed (rescue), and when it drains (release)."""

from __future__ import annotations

import signal

import psycopg
import pytest
from e2e import Supervisor, read_log, wait_until

from shared.enqueue import enqueue_many

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def started_in_db(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE attempted_at IS NOT "
                            "NULL").fetchone()[0]



def finish_elsewhere(dsn: str, log, ids: list[int]) -> dict[int, str]:
    """Start a second supervisor, let it finish every job of ``ids`` (rescued after the
    first one's leases run out), and return every job's state."""
    second = Supervisor(dsn, "-n", "2", "--lease-ttl", "3", log_path=log)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            def finished():
                return conn.execute(
                    "SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) AND state IN "
                    "('completed', 'discarded')", (ids,)).fetchone()[0] == len(ids)
            wait_until(finished, timeout=60, what="every job to finish")
            return dict(conn.execute("SELECT id, state FROM supervisor.jobs").fetchall())
    finally:
        second.stop()

def test_a_killed_supervisors_queued_jobs_are_rescued_with_their_attempts_unspent(
        dsn, tmp_path):
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = enqueue_many("e2e_sleep", [{"seconds": 0.3}] * 20, conn=conn, max_attempts=1)
    log = tmp_path / "run.log"
    first = Supervisor(dsn, "-n", "1", "--prefetch", "20", "--lease-ttl", "3", log_path=log)
    try:
        wait_until(lambda: any(r["event"] == "start" for r in read_log(log)),
                   what="the first job to start")
        # Its start is written before the kill, so a start recorded for jobs that only
        # wait in the child's pipe would be written too (and charged by the rescue).
        wait_until(lambda: started_in_db(dsn) > 0, what="the first start to be written")
        first.signal(signal.SIGKILL)
        first.wait(10)
        rows = finish_elsewhere(dsn, log, ids)
    finally:
        first.stop()
    started = {r["id"] for r in read_log(log) if r["event"] == "start"}
    discarded = [job_id for job_id, state in rows.items() if state == "discarded"]
    assert [job_id for job_id in discarded if job_id not in started] == [], \
        "jobs discarded without ever having run"
    assert len(discarded) <= 1  # at most the one running when the supervisor was killed


def test_a_killed_supervisors_jobs_queued_in_its_children_are_rescued_unspent(dsn, tmp_path):
    # Defaults: short jobs get a pipelined depth, so each child holds jobs queued behind
    # the one it runs when the supervisor dies.
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = enqueue_many("e2e_sleep", [{"seconds": 0.002}] * 1000, conn=conn,
                           max_attempts=1)
    log = tmp_path / "run.log"
    first = Supervisor(dsn, "-n", "2", "--lease-ttl", "3", log_path=log)
    try:
        wait_until(lambda: sum(r["event"] == "end" for r in read_log(log)) >= 100,
                   what="a hundred jobs to finish (the depth is measured by then)")
        written = started_in_db(dsn)
        wait_until(lambda: started_in_db(dsn) > written, what="more starts to be written")
        first.signal(signal.SIGKILL)
        first.wait(10)
        with psycopg.connect(dsn, autocommit=True) as conn:
            held = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state = 'running'"
                                ).fetchone()[0]
        rows = finish_elsewhere(dsn, log, ids)
    finally:
        first.stop()
    started = {r["id"] for r in read_log(log) if r["event"] == "start"}
    discarded = [job_id for job_id, state in rows.items() if state == "discarded"]
    assert held > 2, "the supervisor held no more than its running jobs: nothing queued"
    assert [job_id for job_id in discarded if job_id not in started] == [], \
        "jobs discarded without ever having run"
    assert len(discarded) <= 2  # at most the ones running when the supervisor was killed

"""Queued is not started: jobs a supervisor claimed but had not started go back without
spending an attempt when it is SIGKILLed (rescue), and when it drains (release)."""

from __future__ import annotations

import signal

import psycopg
import pytest
from e2e import Supervisor, read_log, wait_until

from shared.enqueue import enqueue_many

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_a_killed_supervisors_queued_jobs_are_rescued_with_their_attempts_unspent(
        dsn, tmp_path):
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = enqueue_many("e2e_sleep", [{"seconds": 0.3}] * 20, conn=conn, max_attempts=1)
    log = tmp_path / "run.log"
    first = Supervisor(dsn, "-n", "1", "--prefetch", "20", "--lease-ttl", "3", log_path=log)
    try:
        wait_until(lambda: any(r["event"] == "start" for r in read_log(log)),
                   what="the first job to start")
        first.signal(signal.SIGKILL)
        first.wait(10)
        second = Supervisor(dsn, "-n", "2", "--lease-ttl", "3", log_path=log)
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                def finished():
                    return conn.execute(
                        "SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) AND state IN "
                        "('completed', 'discarded')", (ids,)).fetchone()[0] == len(ids)
                wait_until(finished, timeout=60, what="every job to finish")
                rows = dict(conn.execute("SELECT id, state FROM supervisor.jobs").fetchall())
        finally:
            second.stop()
    finally:
        first.stop()
    started = {r["id"] for r in read_log(log) if r["event"] == "start"}
    discarded = [job_id for job_id, state in rows.items() if state == "discarded"]
    assert [job_id for job_id in discarded if job_id not in started] == [], \
        "jobs discarded without ever having run"
    assert len(discarded) <= 1  # at most the one running when the supervisor was killed

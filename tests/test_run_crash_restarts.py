"""Crash restarts of PostgreSQL under a running supervisor, with ``max_attempts=1``: a
claim whose answer is lost with its connection must not strand its jobs under the
supervisor's name until their lease expires (they were then rescued and discarded
without ever having run). After each reconnect the supervisor gives such rows back."""

from __future__ import annotations

import re
import time
import urllib.request

import psycopg
import pytest
from e2e import Supervisor, read_log, wait_until

from shared.enqueue import enqueue_many
from shared.migrate import migrate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

JOBS = 12000  # enough that work remains through every restart at pipelined speed
RESTARTS = 4


def counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
        return dict(conn.execute("SELECT state, count(*) FROM supervisor.jobs "
                                 "GROUP BY state").fetchall())


def test_crash_restarts_discard_no_job_that_never_ran(throwaway_server, tmp_path):
    dsn = throwaway_server.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        enqueue_many("e2e_noop", [{"n": i} for i in range(JOBS)], conn=conn, max_attempts=1)
    log = tmp_path / "run.log"
    sup = Supervisor(dsn, "-n", "2", "--lease-ttl", "5", "--metrics-port", "0", log_path=log)
    try:
        for _ in range(RESTARTS):
            done_before = len(read_log(log))
            wait_until(lambda n=done_before: len(read_log(log)) > n + 100, timeout=30,
                       what="jobs running between restarts")
            throwaway_server.crash()
            time.sleep(0.5)  # down for a moment, as a crash restart is
            throwaway_server.start()
        wait_until(lambda: counts(dsn).get("available", 0) + counts(dsn).get("running", 0)
                   == 0, timeout=60, what="the queue to drain")
        # Past a lease: a stranded row would have been rescued (and discarded) by now.
        time.sleep(7.0)
        final = counts(dsn)
        port = re.search(r"metrics on http://[\d.]+:(\d+)/", sup.err).group(1)
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        with psycopg.connect(dsn, autocommit=True) as conn:
            discarded = [row[0] for row in conn.execute(
                "SELECT id FROM supervisor.jobs WHERE state = 'discarded'")]
    finally:
        if not throwaway_server.running:
            throwaway_server.start()
        sup.stop()
    ran = {r["id"] for r in read_log(log)}
    unrun = [job_id for job_id in discarded if job_id not in ran]
    assert unrun == [], f"{len(unrun)} jobs discarded without ever running: {unrun[:10]}"
    assert final.get("completed", 0) + len(discarded) == JOBS, final
    # The metrics agree with the table: no completion counted that the database lost.
    counted = sum(float(line.rsplit(" ", 1)[1]) for line in scrape.decode().splitlines()
                  if line.startswith("supervisor_jobs_completed_total{"))
    assert counted == final.get("completed", 0), (counted, final)

"""A real supervisor through a real database outage on a private PostgreSQL.

Two defects this guards against: the parent spinning at most of a core while the
database was away, and, after an outage longer than the lease, the supervisor rescuing
its own jobs as if another had died, fencing off its own completions and running again
jobs that had finished during the outage.
"""

from __future__ import annotations

import os
import time

import psycopg
import pytest
from e2e import Supervisor, read_log, wait_until

from shared.enqueue import enqueue_many
from shared.migrate import migrate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

LEASE = 10  # seconds; the outage outlasts it, as a 40 s one outlasts the default 30 s
OUTAGE = 14.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def test_an_outage_longer_than_the_lease_reruns_nothing_and_does_not_spin(
        throwaway_server, tmp_path):
    dsn = throwaway_server.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        ids = enqueue_many("e2e_sleep", [{"seconds": 2.0}] * 4, conn=conn, max_attempts=1)
    log = tmp_path / "run.log"
    sup = Supervisor(dsn, "-n", "2", "--lease-ttl", str(LEASE), log_path=log)
    try:
        wait_until(lambda: len([r for r in read_log(log) if r["event"] == "start"]) == 2,
                   what="two jobs running")
        throwaway_server.stop()
        down_at = time.monotonic()
        # Both running jobs finish while the database is away; their outcomes wait.
        wait_until(lambda: len([r for r in read_log(log) if r["event"] == "end"]) == 2,
                   what="the running jobs to end during the outage")
        cpu_before = cpu_seconds(sup.pid)
        time.sleep(10.0)  # measuring: CPU used over ten seconds of outage
        cpu_used = cpu_seconds(sup.pid) - cpu_before
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - down_at)))
        throwaway_server.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            def all_completed():
                rows = conn.execute("SELECT state FROM supervisor.jobs WHERE id = ANY(%s)",
                                    (ids,)).fetchall()
                return all(state == "completed" for (state,) in rows)
            wait_until(all_completed, timeout=60, what="every job completed")
            errors = conn.execute("SELECT id, errors FROM supervisor.jobs "
                                  "WHERE errors <> '[]'::jsonb").fetchall()
    finally:
        if throwaway_server.running is False:
            throwaway_server.start()
        sup.stop()
    starts = [r["id"] for r in read_log(log) if r["event"] == "start"]
    assert sorted(starts) == sorted(ids), f"a job ran twice or not at all: {starts}"
    assert errors == [], f"jobs picked up errors across the outage: {errors}"
    assert cpu_used < 1.0, f"the parent used {cpu_used:.2f} CPU-s in 10 s of outage"


def test_back_within_about_a_second_of_the_server_answering(throwaway_server, tmp_path):
    dsn = throwaway_server.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", "0.2")
    try:
        sup.wait_for_log("starting 1 children")
        throwaway_server.stop()
        sup.wait_for_log("database connection lost", timeout=20)
        time.sleep(5.0)  # a five-second outage: the backoff must not have grown past 1 s
        throwaway_server.start()
        answered_at = time.monotonic()
        sup.wait_for_log("database connection restored", timeout=20)
        back_after = time.monotonic() - answered_at
    finally:
        if not throwaway_server.running:
            throwaway_server.start()
        sup.stop()
    assert back_after < 2.0, f"reconnected {back_after:.1f} s after the server answered"

"""Memory with real children: the per-child cap still kills a job past it and names the
job's reservation (a job that reserved more than the cap may use its reservation); and
a simulated pod that jobs without admission overrun (OOM kills), where with a budget
none is killed and every job completes."""

from __future__ import annotations

import psycopg
import pytest
from e2e import Supervisor, job_row, wait_until

from shared.enqueue import enqueue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_the_memory_cap_kill_names_the_reservation(dsn, tmp_path):
    small = enqueue("adm_grow", {"megabytes": 400}, memory="64MiB", max_attempts=1, dsn=dsn)
    roomy = enqueue("adm_grow", {"megabytes": 200}, memory="600MiB", max_attempts=1, dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", "--max-memory-per-child", "150MiB",
                     app="admission_handlers")
    try:
        wait_until(lambda: job_row(dsn, small)["state"] == "discarded"
                   and job_row(dsn, roomy)["state"] in ("completed", "discarded"),
                   timeout=120, what="both jobs to end")
    finally:
        sup.stop()
    (error,) = job_row(dsn, small)["errors"]
    assert error["kind"] == "memory", error
    assert "max_memory_per_child" in error["message"]
    assert "the job reserved 64 MiB" in error["message"], error["message"]
    # Reserved 600 MiB: growing to 200 MiB, past the 150 MiB cap, is within its reservation.
    assert job_row(dsn, roomy)["state"] == "completed", job_row(dsn, roomy)["errors"]


def _pod_run(dsn: str, tmp_path, *flags: str) -> dict[str, int]:
    ledger = tmp_path / "pod"
    ledger.mkdir(parents=True)
    for _ in range(8):
        enqueue("adm_pod_job", {"megabytes": 80, "pod_megabytes": 200,
                                "ledger": str(ledger)}, memory="80MiB", dsn=dsn)
    sup = Supervisor(dsn, "-n", "4", *flags, app="admission_handlers")
    try:
        wait_until(lambda: _states(dsn).get("completed", 0) + _states(dsn).get("discarded", 0)
                   == 8, timeout=120, what="every pod job to end")
    finally:
        sup.stop()
    return _states(dsn)


def _states(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dict(conn.execute("SELECT state, count(*) FROM supervisor.jobs "
                                 "GROUP BY state").fetchall())


def test_without_admission_the_pod_is_overrun_and_with_a_budget_every_job_completes(
        dsn, tmp_path):
    # Without a budget (no cgroup limit here), four 80 MiB jobs run at once in a 200 MiB
    # pod: the simulated OOM killer takes some.
    without = _pod_run(dsn, tmp_path / "without")
    assert without.get("discarded", 0) > 0, without
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM supervisor.jobs")
    # With a budget of two such jobs, none is killed.
    within = _pod_run(dsn, tmp_path / "within", "--memory-budget", "160MiB")
    assert within == {"completed": 8}, within

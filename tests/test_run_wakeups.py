"""A real supervisor wakes for scheduled jobs, retries and pauses when they happen, not
at its next poll: the poll interval here is 5 s, so a supervisor that waited for it
would be seconds late."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import psycopg
import pytest
from e2e import Supervisor, read_log, wait_until

from shared.enqueue import enqueue, enqueue_many
from supervisor.admin import set_paused

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

POLL = "5"


def runs(log):
    return [r for r in read_log(log) if r["event"] in ("run", "start")]


def beat_recorded(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM supervisor.supervisors").fetchone()[0] > 0


def lateness(dsn: str, job_id: int, started_at: float) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        run_at = conn.execute("SELECT extract(epoch FROM run_at) FROM supervisor.jobs "
                              "WHERE id = %s", (job_id,)).fetchone()[0]
    return started_at - float(run_at)


def test_a_job_for_later_starts_when_it_is_due_not_at_the_next_poll(dsn, tmp_path):
    log = tmp_path / "run.log"
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", POLL, log_path=log)
    try:
        # Its first turn polls and beats; once the beat is in, only events wake it.
        wait_until(lambda: beat_recorded(dsn), what="the first maintenance round")
        with psycopg.connect(dsn, autocommit=True) as conn:
            late = [enqueue("e2e_noop", {"n": i}, delay=0.8 + 0.4 * i, conn=conn)
                    for i in range(3)]
        wait_until(lambda: len(runs(log)) == 3, timeout=20, what="the three jobs to run")
    finally:
        sup.stop()
    by_id = {r["id"]: r["t"] for r in runs(log)}
    delays = [lateness(dsn, job_id, by_id[job_id]) for job_id in late]
    assert max(delays) < 1.0, f"started {delays} s after their run_at"


def test_a_retry_starts_when_its_delay_is_over(dsn, tmp_path):
    log = tmp_path / "run.log"
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", POLL, log_path=log)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            job_id = enqueue("e2e_retry_once", {"delay": 0.6}, conn=conn)
        wait_until(lambda: len(runs(log)) == 2, timeout=20, what="the retry")
    finally:
        sup.stop()
    first, second = sorted(r["t"] for r in runs(log))
    gap = timedelta(seconds=second - first).total_seconds()
    assert gap < 0.6 + 1.0, f"the retry came {gap:.2f} s after the first attempt ({job_id})"


def test_pausing_a_queue_starts_none_of_the_jobs_it_had_claimed(dsn, tmp_path):
    log = tmp_path / "run.log"
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many("e2e_sleep", [{"seconds": 0.5}] * 20, conn=conn)
    sup = Supervisor(dsn, "-n", "1", "--prefetch", "4", log_path=log)
    try:
        wait_until(lambda: len(runs(log)) >= 2, what="jobs running")
        with psycopg.connect(dsn, autocommit=True) as conn:
            set_paused(conn, "default", True)
        paused_at = time.time()
        time.sleep(2.0)  # four job lengths: any prefetched job would have started
        with psycopg.connect(dsn, autocommit=True) as conn:
            running = conn.execute("SELECT count(*) FROM supervisor.jobs "
                                   "WHERE state = 'running'").fetchone()[0]
    finally:
        sup.stop()
    started_after = [r for r in runs(log) if r["t"] > paused_at + 0.05]
    assert started_after == [], f"{len(started_after)} jobs started after the pause"
    assert running == 0, "claimed jobs of the paused queue were not given back"


def test_burst_waits_for_work_due_within_its_horizon_and_names_what_is_left(dsn, tmp_path):
    log = tmp_path / "run.log"
    with psycopg.connect(dsn, autocommit=True) as conn:
        soon = enqueue("e2e_noop", {"n": 1}, delay=1.5, conn=conn)
        enqueue("e2e_noop", {"n": 2}, delay=3600, conn=conn)
    sup = Supervisor(dsn, "-n", "1", "--burst", log_path=log)
    assert sup.wait(30) == 0, sup.err
    assert [r["id"] for r in runs(log)] == [soon]
    last = [line for line in sup.err.splitlines() if "burst:" in line][-1]
    assert "1 jobs are due later than the 60 s horizon" in last, last


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_once_its_jobs_are_done_an_idle_supervisor_sleeps(dsn, tmp_path):
    # One job for two children: the claim comes back short, so the completion is
    # written on its own and no claim follows until the next poll (5 s). A write time
    # left behind by the job's start once kept the parent spinning until then.
    log = tmp_path / "run.log"
    sup = Supervisor(dsn, "-n", "2", "--poll-interval", POLL, log_path=log)
    try:
        wait_until(lambda: beat_recorded(dsn), what="the first maintenance round")
        with psycopg.connect(dsn, autocommit=True) as conn:
            job_id = enqueue("e2e_noop", {}, conn=conn)
        wait_until(lambda: job_state(dsn, job_id) == "completed", what="the job")
        before = cpu_seconds(sup.proc.pid)
        time.sleep(2.0)
        used = cpu_seconds(sup.proc.pid) - before
    finally:
        sup.stop()
    assert used < 0.5, f"the idle parent used {used:.2f} s of CPU in 2 s"


def job_state(dsn: str, job_id: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s",
                            (job_id,)).fetchone()[0]

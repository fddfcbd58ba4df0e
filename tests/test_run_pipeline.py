"""Pipelined children under a real supervisor: jobs queued in a child's pipe behind a
job that crashes it run elsewhere with their attempt unspent, and a drain releases what
children hold queued without running it."""

from __future__ import annotations

import signal

import psycopg
import pytest
from e2e import Supervisor, read_log, run_burst, wait_until

from shared.enqueue import enqueue_many

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.mark.parametrize("extra", [(), ("--prefetch", "8")], ids=["auto", "prefetch-8"])
def test_max_attempts_1_jobs_queued_behind_a_crashing_job_all_complete(dsn, tmp_path,
                                                                       extra):
    # The crasher comes after enough short jobs for the auto depth to queue jobs behind
    # it in the child's pipe: they come back unstarted and another child runs them.
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = enqueue_many("e2e_noop", [{}] * 60, conn=conn, max_attempts=1)
        (crasher,) = enqueue_many("e2e_segv_once", [{}], conn=conn, max_attempts=1)
        after = enqueue_many("e2e_noop", [{}] * 60, conn=conn, max_attempts=1)
    log = tmp_path / "run.log"
    run_burst(dsn, "-n", "1", *extra, log_path=log)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = dict(conn.execute("SELECT id, state FROM supervisor.jobs").fetchall())
    assert rows.pop(crasher) == "discarded"
    assert set(rows.values()) == {"completed"}, rows
    runs = [r["id"] for r in read_log(log) if r["event"] == "run" and r["id"] != crasher]
    assert sorted(runs) == sorted(before + after)  # each exactly once


def test_sigterm_releases_jobs_queued_in_a_child_without_running_them(dsn, tmp_path):
    release = tmp_path / "release"
    with psycopg.connect(dsn, autocommit=True) as conn:
        (held,) = enqueue_many("e2e_wait_for", [{"path": str(release)}], conn=conn)
        queued = enqueue_many("e2e_noop", [{}] * 10, conn=conn, max_attempts=1)
    log = tmp_path / "run.log"
    sup = Supervisor(dsn, "-n", "1", "--prefetch", "11", "--grace", "30", log_path=log)
    try:
        wait_until(lambda: any(r["event"] == "start" for r in read_log(log)),
                   what="the held job to start")
        sup.signal(signal.SIGTERM)
        sup.wait_for_log("draining")
        release.touch()
        assert sup.wait(30) == 0
    finally:
        sup.stop()
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = {r[0]: r[1:] for r in conn.execute(
            "SELECT id, state, attempt FROM supervisor.jobs").fetchall()}
    assert rows[held] == ("completed", 1)
    assert {rows[i] for i in queued} == {("available", 0)}  # back, attempt unspent
    assert [r["id"] for r in read_log(log) if r["event"] == "run"] == []


def test_repeated_drains_under_a_stream_of_short_jobs_never_run_a_job_twice(dsn, tmp_path):
    # A drained child used to have its queued jobs taken back with SKIP at once; a child
    # already done with its head had run some of them before the SKIP arrived, and they
    # ran again elsewhere (the kill storm: about three per drain). Now they come back
    # only once the child has exited.
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = enqueue_many("e2e_noop", [{}] * 6000, conn=conn, max_attempts=1)
    log = tmp_path / "run.log"

    def runs() -> int:
        return sum(1 for r in read_log(log) if r["event"] == "run")

    def left() -> int:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state <> "
                                "'completed'").fetchone()[0]

    drains = 0
    while left():
        sup = Supervisor(dsn, "-n", "2", "--burst", log_path=log)
        try:
            seen = runs()
            # Drain mid-stream: once this supervisor has run a few hundred jobs.
            wait_until(lambda seen=seen, proc=sup.proc: runs() >= min(seen + 400, len(ids))
                       or proc.poll() is not None, timeout=60, interval=0.005,
                       what="a few hundred runs")
            if sup.proc.poll() is None:
                sup.signal(signal.SIGTERM)
                drains += 1
            code = sup.wait(60)
            # A TERM that lands as a finished burst is already exiting meets the default
            # action (the handlers are gone): its work was done and written.
            assert code == 0 or (code == -signal.SIGTERM and "stopped (" in sup.err), \
                sup.err[-2000:]
        finally:
            sup.stop()
    ran = [r["id"] for r in read_log(log) if r["event"] == "run"]
    twice = sorted({i for i in ran if ran.count(i) > 1})
    assert drains >= 5
    assert not twice, f"{len(twice)} jobs ran twice after {drains} drains: {twice[:10]}"
    assert sorted(ran) == sorted(ids)


def test_pausing_and_resuming_under_a_stream_of_short_jobs_never_runs_a_job_twice(dsn,
                                                                                   tmp_path):
    # A pause asks children for the jobs of the queue they hold queued. Taken back at
    # the SKIP's word, a job the child had already run came back and ran again after
    # the resume; now a job comes back only when its child says it dropped it.
    from supervisor.cli.admin import set_paused

    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = enqueue_many("e2e_noop", [{}] * 6000, conn=conn, max_attempts=1)
    log = tmp_path / "run.log"

    def runs() -> int:
        return sum(1 for r in read_log(log) if r["event"] == "run")

    sup = Supervisor(dsn, "-n", "2", log_path=log)
    pauses = 0
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while runs() < len(ids) and pauses < 40:
                seen = runs()
                wait_until(lambda seen=seen: runs() >= min(seen + 150, len(ids)),
                           timeout=30, interval=0.005, what="runs between pauses")
                set_paused(conn, "default", True)
                pauses += 1
                set_paused(conn, "default", False)
            wait_until(lambda: conn.execute(
                "SELECT count(*) FROM supervisor.jobs WHERE state <> 'completed'"
            ).fetchone()[0] == 0, timeout=60, what="every job completed")
    finally:
        sup.stop()
    ran = [r["id"] for r in read_log(log) if r["event"] == "run"]
    twice = sorted({i for i in ran if ran.count(i) > 1})
    assert pauses >= 10
    assert not twice, f"{len(twice)} jobs ran twice after {pauses} pauses: {twice[:10]}"
    assert sorted(ran) == sorted(ids)

"""Pipelined children under a real supervisor: jobs queued in a child's pipe behind a
job that crashes it run elsewhere with their attempt unspent, and storms of drains and
pauses never run a job twice. (A drain releasing what a child holds queued, unrun:
tests/test_run_signals.py.)"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

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


class ShortJobStream:
    """No-op jobs with one attempt each, and their run log: the storms below interrupt
    the supervisors running them and then check that each ran exactly once. What a storm
    proves grows with its interruptions (and needs the children's pipes full at each), not
    with the jobs run between two of them."""

    def __init__(self, dsn: str, log: Path, count: int = 3000) -> None:
        self.dsn, self.log = dsn, log
        with psycopg.connect(dsn, autocommit=True) as conn:
            self.ids = enqueue_many("e2e_noop", [{}] * count, conn=conn, max_attempts=1)

    def ran(self) -> list[int]:
        return [r["id"] for r in read_log(self.log) if r["event"] == "run"]

    def runs(self) -> int:
        """len(self.ran()) without parsing every record (polled every 5 ms)."""
        if not self.log.exists():
            return 0
        data = self.log.read_bytes()
        return data[:data.rfind(b"\n") + 1].count(b'"event":"run"')

    def runs_past(self, seen: int, more: int):
        """A predicate: ``more`` runs after ``seen`` (or all of them)."""
        return lambda: self.runs() >= min(seen + more, len(self.ids))

    def left(self) -> int:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state <> "
                                "'completed'").fetchone()[0]

    def assert_each_ran_once(self, after: str) -> None:
        ran = self.ran()
        twice = sorted(i for i, n in Counter(ran).items() if n > 1)
        assert not twice, f"{len(twice)} jobs ran twice after {after}: {twice[:10]}"
        assert sorted(ran) == sorted(self.ids)


@pytest.mark.parametrize(("children", "between", "jobs"), [("2", 200, 3000),
                                                         ("16", 60, 8000)])
def test_repeated_drains_under_a_stream_of_short_jobs_never_run_a_job_twice(dsn, tmp_path,
                                                                            children, between,
                                                                            jobs):
    # A drained child used to have its queued jobs taken back with SKIP at once; a child
    # already done with its head had run some of them before the SKIP arrived, and they
    # ran again elsewhere (the kill storm: about three per drain). Now they come back
    # only once the child has exited. At -n 16 (issue 48) sixteen pipes are full at each
    # drain, and the children forked after the first job may still be starting; they
    # run several hundred jobs before a signal lands, hence the longer stream.
    stream = ShortJobStream(dsn, tmp_path / "run.log", count=jobs)
    drains = 0
    while stream.left():
        sup = Supervisor(dsn, "-n", children, "--burst", log_path=stream.log)
        try:
            # Drain mid-stream: once this supervisor has run ``between`` jobs (its
            # children's pipes full long before): about 15 drains at -n 2, 8 at -n 16.
            enough = stream.runs_past(stream.runs(), between)
            wait_until(lambda enough=enough, proc=sup.proc: enough() or proc.poll() is not None,
                       timeout=60, interval=0.005, what="a couple of hundred runs")
            if sup.proc.poll() is None:
                sup.signal(signal.SIGTERM)
                drains += 1
            code = sup.wait(60)
            # A TERM that lands as a finished burst is already exiting meets the default
            # action (the handlers are gone): its work was done and written.
            assert code == 0 or (code == -signal.SIGTERM and "stopped (" in sup.err), \
                sup.err[-2000:]
            # Nothing is left leased to a supervisor that has exited: at -n 16 a drain's
            # long first write was cut short and dropped the claim in flight, whose jobs
            # then waited out their lease (30 s) under its name (docs/reliability.md).
            with psycopg.connect(dsn, autocommit=True) as conn:
                stranded = conn.execute("SELECT count(*) FROM supervisor.jobs "
                                        "WHERE state = 'running'").fetchone()[0]
            assert stranded == 0, f"{stranded} jobs left leased after a drain\n{sup.err[-2000:]}"
        finally:
            sup.stop()
    assert drains >= 5
    stream.assert_each_ran_once(f"{drains} drains")


def test_pausing_and_resuming_under_a_stream_of_short_jobs_never_runs_a_job_twice(dsn,
                                                                                   tmp_path):
    # A pause asks children for the jobs of the queue they hold queued. Taken back at
    # the SKIP's word, a job the child had already run came back and ran again after
    # the resume; now a job comes back only when its child says it dropped it.
    from supervisor.admin import set_paused

    stream = ShortJobStream(dsn, tmp_path / "run.log", count=6000)
    sup = Supervisor(dsn, "-n", "2", log_path=stream.log)
    pauses = 0
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            # 60 pauses with full pipes between them: the cursor race (docs/reliability.md,
            # 2026-12-06) showed in 1 of 4 such storms.
            while stream.runs() < len(stream.ids) and pauses < 60:
                wait_until(stream.runs_past(stream.runs(), 100), timeout=30,
                           interval=0.005, what="runs between pauses")
                set_paused(conn, "default", True)
                pauses += 1
                set_paused(conn, "default", False)
        wait_until(lambda: stream.left() == 0, timeout=60, what="every job completed")
    finally:
        sup.stop()
    assert pauses >= 10
    stream.assert_each_ran_once(f"{pauses} pauses")

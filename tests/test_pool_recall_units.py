"""Recall (issue 28) against a fake OS: the jobs queued behind a head job that runs past
its kind's p95 (and at least 50 ms) are asked back with SKIP and given to another child,
or to the table when every other child is stuck too; an overrunning child takes no
more jobs; and a FAILED ``expired`` without a START is a job that never ran."""

from __future__ import annotations

import pytest
from pool_fakes import Harness

from shared import wire
from shared.jobs import FAIL_EXPIRED, ClaimedJob
from supervisor.pool import JobDone, JobExpired, JobReturned, JobStarted
from supervisor.pool.runtimes import MIN_OVERRUN, RunTimes

pytestmark = pytest.mark.timeout(10)


def job(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", "default", 1, 5, 0, None, "{}")


def two_children() -> tuple[Harness, int, int]:
    h = Harness(auto_start=False, size=2)
    h.pool.start()
    h.ready()
    h.take()
    first, second = h.pids()
    return h, first, second


def long_head_and_short_head(h: Harness, short_depth: int = 1) -> tuple[int, int]:
    """Job 1 starts in one child (``a``) and job 9 in the other (``b``, a pipe of
    ``short_depth``); then jobs 2 to 4 are dispatched (to ``a`` when ``b`` has no room)."""
    assert h.pool.dispatch(job(1), 8)
    a = h.pool._in_flight[1].pid
    assert h.pool.dispatch(job(9), short_depth)
    b = h.pool._in_flight[9].pid
    h.says(a, wire.Start(1).encode())
    h.says(b, wire.Start(9).encode())
    for job_id in (2, 3, 4):
        assert h.pool.dispatch(job(job_id), 8)
    h.pool.push()
    h.take()
    return a, b


def skips_sent(h: Harness, pid: int) -> list[int]:
    return [wire.Skip.decode(f).job for f in h.sent(pid) if f.type == wire.SKIP]


def test_jobs_behind_an_overrunning_head_are_recalled_for_the_other_child():
    h, _, _ = two_children()
    first, _ = long_head_and_short_head(h)
    assert [j.id for j in h.child(first).jobs] == [1, 2, 3, 4]
    h.advance(MIN_OVERRUN * 0.9)
    assert skips_sent(h, first) == []  # not overrunning yet
    h.advance(MIN_OVERRUN * 0.2)
    assert skips_sent(h, first) == [2, 3, 4]
    assert h.child(first).room(8) == 0  # takes nothing more until job 1 ends
    assert h.pool.overrunning() == 1
    # Nothing comes back before the child says so; then they are ours, for another child.
    assert h.take(JobReturned) == []
    h.says(first, wire.Skipped(2).encode() + wire.Skipped(3).encode()
           + wire.Skipped(4).encode())
    back = h.take(JobReturned)
    assert [(o.job.id, o.keep, o.release) for o in back] == [(2, True, False),
                                                            (3, True, False),
                                                            (4, True, False)]
    # Its head ends: the child is an ordinary idle child again.
    h.says(first, wire.Done(1, b"null").encode())
    assert h.pool.overrunning() == 0 and h.child(first).room(8) == 8


def test_a_recalled_job_the_child_took_first_runs_there_once():
    h, _, _ = two_children()
    first, _ = long_head_and_short_head(h)
    h.advance(MIN_OVERRUN * 1.1)
    # Job 1 ended as the SKIPs crossed: the child took job 2 before reading them.
    h.says(first, wire.Done(1, b"null").encode() + wire.Start(2).encode()
           + wire.Skipped(3).encode() + wire.Skipped(4).encode())
    outcomes = h.take()
    assert [o.job.id for o in outcomes if isinstance(o, JobStarted)] == [2]
    assert [o.job.id for o in outcomes if isinstance(o, JobReturned)] == [3, 4]
    assert h.signals_to(first) == []
    h.says(first, wire.Done(2, b"null").encode())
    assert [o.job.id for o in h.take(JobDone)] == [2]


def test_when_every_other_child_is_stuck_too_they_go_back_to_the_table():
    h, _, _ = two_children()
    a, b = long_head_and_short_head(h, short_depth=8)  # queued jobs in both pipes
    queued = {pid: [j.id for j in list(h.child(pid).jobs)[1:]] for pid in (a, b)}
    assert queued[a] and queued[b]
    h.advance(MIN_OVERRUN * 1.1)  # both heads overrun
    assert h.pool.overrunning() == 2
    for pid in (a, b):
        h.says(pid, b"".join(wire.Skipped(i).encode() for i in queued[pid]))
    back = h.take(JobReturned)
    releases = sorted((o.job.id, o.release) for o in back)
    # Whichever child was judged first recalled for the other; the second found none
    # free and released its jobs to the table.
    assert {r for _, r in releases} == {True, False}
    assert sorted(i for i, _ in releases) == [2, 3, 4]


def test_a_head_alone_in_its_pipe_arms_no_recall():
    h, first, _ = two_children()
    assert h.pool.dispatch(job(1), 8)
    h.says(first, wire.Start(1).encode())
    assert h.child(first).recall_at is None


def test_an_expired_answer_without_start_is_a_job_that_never_ran():
    h = Harness(auto_start=False, size=1)
    h.pool.start()
    h.ready()
    h.take()
    (first,) = h.pids()
    assert h.pool.dispatch(job(1), 8) and h.pool.dispatch(job(2), 8)
    h.pool.push()
    h.says(first, wire.Start(1).encode())
    h.says(first, wire.Done(1, b"null").encode()
           + wire.Failed(2, FAIL_EXPIRED, "expired before it started").encode())
    outcomes = h.take()
    assert [type(o).__name__ for o in outcomes] == ["JobStarted", "JobDone", "JobExpired"]
    assert [o.job.id for o in outcomes if isinstance(o, JobExpired)] == [2]
    assert h.pool.held_count() == 0 and h.pool.idle_count() == 1


def test_run_times_p95_per_kind_and_the_50_ms_floor():
    times = RunTimes()
    assert times.overrun_after("k") == MIN_OVERRUN  # not measured yet
    for i in range(200):
        times.ran("k", 3.0 if i % 200 == 199 else 0.002)
    assert times.p95("k") == pytest.approx(0.002)
    assert times.overrun_after("k") == MIN_OVERRUN
    for _ in range(200):
        times.ran("slow", 0.4)
    assert times.overrun_after("slow") == pytest.approx(0.4)

"""Recall (issue 28) against a fake OS: the jobs queued behind a head job that runs past
its kind's p95 (and at least 50 ms) are asked back with SKIP and given to another child,
or to the table when every other child is stuck too; an overrunning child takes no
more jobs; and a FAILED ``expired`` without a START is a job that never ran."""

from __future__ import annotations

import pytest
from pool_fakes import Harness

from shared import wire
from shared.jobs import FAIL_EXPIRED, ClaimedJob
from supervisor.pool import JobDone, JobExpired, JobReturned, JobStarted, RunTimes
from supervisor.tuning import DEFAULT

MIN_OVERRUN, TAIL_SHARE, TAIL_WINDOW = DEFAULT.min_overrun, DEFAULT.tail_share, DEFAULT.tail_window

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
    first, second = long_head_and_short_head(h)
    h.says(second, wire.Done(9, b"null").encode())  # the other child is free
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


def test_a_head_alone_in_its_pipe_that_overruns_takes_nothing_more():
    """With a pipe of one nothing is ever queued behind a long head, so nothing armed
    its watch: the stuck child kept being claimed for, and when both children were
    stuck the jobs claimed for them waited in the parent for seconds (the benchmark's
    "claimed while every child ran a long job", 2.45 s)."""
    h, first, second = two_children()
    assert h.pool.dispatch(job(1), 8)
    h.says(first, wire.Start(1).encode())
    assert h.child(first).recall_at is not None
    h.advance(MIN_OVERRUN * 1.1)
    assert h.pool.overrunning() == 1
    assert skips_sent(h, first) == []  # nothing to recall
    # The next job goes to the other child, never behind the stuck one.
    assert h.pool.dispatch(job(2), 8)
    assert h.pool._in_flight[2].pid == second
    assert h.child(first).room(8) == 0
    # Its head ends: it takes jobs again.
    h.says(first, wire.Done(1, b"null").encode())
    assert h.pool.overrunning() == 0 and h.child(first).room(8) == 8


def test_when_both_lone_heads_overrun_every_child_counts_as_stuck():
    h, first, second = two_children()
    assert h.pool.dispatch(job(1), 1) and h.pool.dispatch(job(2), 1)
    h.says(first, wire.Start(1).encode())
    h.says(second, wire.Start(2).encode())
    assert h.pool.overrunning() == 0
    h.advance(MIN_OVERRUN * 1.1)
    # What the engine claims for (size - overrunning) is nothing now; what waits in it
    # goes back to the table (``Engine._all_stuck``).
    assert h.pool.overrunning() == 2
    assert not h.pool.dispatch(job(3), 8)


def test_a_head_that_answers_in_time_never_overruns():
    h, first, _ = two_children()
    assert h.pool.dispatch(job(1), 8)
    h.says(first, wire.Start(1).encode())
    h.advance(MIN_OVERRUN * 0.5)
    h.says(first, wire.Done(1, b"null").encode())
    assert h.child(first).recall_at is None
    h.advance(MIN_OVERRUN)
    assert h.pool.overrunning() == 0 and h.pool.idle_count() == 2


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
        times.ran("k", "q", 3.0 if i % 200 == 199 else 0.002)
    assert times.p95("k") == pytest.approx(0.002)
    assert times.overrun_after("k") == MIN_OVERRUN
    for i in range(200):
        times.ran("even", "q", 0.1 + 0.001 * (i % 5))  # 100-104 ms: its p95 is 104 ms
    # Twice the p95: one run in twenty passes the p95 itself, an ordinary run.
    assert times.overrun_after("even") == pytest.approx(2 * 0.104)


def heavy_tailed(times: RunTimes, kind: str, runs: int, every: int) -> None:
    for i in range(runs):
        times.ran(kind, "q", 3.0 if i % every == every - 1 else 0.002)


def test_a_kind_without_a_tail_has_no_pipe_cap():
    times = RunTimes()
    assert times.pipe_cap("k") is None  # not measured
    for _ in range(1000):
        times.ran("k", "q", 0.002)
    assert times.pipe_cap("k") is None
    # A uniformly slow kind jitters past its p95 by a hair, never by ten times its median.
    for i in range(1000):
        times.ran("slow", "q", 0.06 + (i % 7) * 0.001)
    assert times.pipe_cap("slow") is None


def test_the_pipe_cap_keeps_the_jobs_behind_tail_runs_under_the_share():
    times = RunTimes()
    heavy_tailed(times, "one_in_200", 1000, 200)
    # 5 tail runs in 1000: a pipe of 2 leaves 0.5% of the jobs behind one.
    assert times.pipe_cap("one_in_200") == 1 + int(TAIL_SHARE * 200)
    heavy_tailed(times, "one_in_1000", 1000, 1000)
    assert times.pipe_cap("one_in_1000") == 1 + int(TAIL_SHARE * 1000)
    heavy_tailed(times, "one_in_20", 1000, 20)
    # Never a pipe of one: the child would wait for the parent after every job.
    assert times.pipe_cap("one_in_20") == 2
    # The tail leaves the window: the cap goes.
    for _ in range(TAIL_WINDOW):
        times.ran("one_in_200", "q", 0.002)
    assert times.pipe_cap("one_in_200") is None


def test_a_tail_is_judged_against_the_median_before_it():
    times = RunTimes()
    times.ran("k", "q", 3.0)  # the first run: no median to be a tail of
    assert times.pipe_cap("k") is None
    times = RunTimes()
    times.ran("k", "q", 0.001)
    times.ran("k", "q", MIN_OVERRUN * 0.9)  # ten times the median, short of the floor
    assert times.pipe_cap("k") is None
    times.ran("k", "q", MIN_OVERRUN)
    assert times.pipe_cap("k") == 2  # one tail in three runs


def test_dispatch_holds_no_more_than_the_cap_in_a_pipe():
    h, first, second = two_children()
    heavy_tailed(h.pool.run_times, "pool_noop", 1000, 200)  # cap 2
    assert h.pool.dispatch(job(1), 8) and h.pool.dispatch(job(2), 8)
    assert {h.pool._in_flight[1].pid, h.pool._in_flight[2].pid} == {first, second}
    assert h.pool.dispatch(job(3), 8) and h.pool.dispatch(job(4), 8)
    # Each pipe holds 2 now, against the queue's depth of 8: the rest wait in the parent.
    assert not h.pool.dispatch(job(5), 8)
    assert sorted(len(h.child(pid).jobs) for pid in (first, second)) == [2, 2]


def test_one_p95_for_the_overrun_and_the_drain_whenever_asked():
    """Issue 41: one estimator, one percentile rule: what a drain reads as a kind's p95
    is what its overrun threshold is twice of, after any number of runs."""
    times = RunTimes()
    for i in range(1, 260):
        times.ran("k", "q", 0.01 * (i % 37 + 1))
        if i >= DEFAULT.drain_min_samples:
            p95 = times.p95("k")
            assert p95 is not None
            assert times.overrun_after("k") == max(MIN_OVERRUN, DEFAULT.overrun_factor * p95)

"""A child's queue of jobs as the parent keeps it, against a fake OS: what START means,
which answers are taken, how the pipe is stocked, and the races a START can lose
against a SKIP or a STOP."""

from __future__ import annotations

import signal

import pytest
from pool_fakes import Harness

from shared import wire
from shared.jobs import ClaimedJob
from supervisor.pool import JobDone, JobReturned, JobStarted

pytestmark = pytest.mark.timeout(10)


def job(job_id: int, timeout: float | None = None) -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", "default", 1, 5, 0, timeout, "{}")


def one_child(**overrides) -> tuple[Harness, int]:
    h = Harness(auto_start=False, size=1, **overrides)
    h.pool.start()
    h.ready()
    h.take()
    return h, h.pids()[0]


def queued(h: Harness, *ids: int, depth: int = 4, timeout: float | None = None) -> None:
    for job_id in ids:
        assert h.pool.dispatch(job(job_id, timeout), depth)
    h.pool.push()


def running_with_two_queued(h: Harness, pid: int) -> None:
    """Job 1 started in the child, jobs 2 and 3 queued behind it."""
    queued(h, 1, 2, 3)
    h.says(pid, wire.Start(1).encode())
    h.take()


def test_frames_for_a_busy_child_go_out_together_at_push():
    h, pid = one_child()
    assert h.pool.dispatch(job(1), 4)
    assert [f.type for f in h.sent(pid)] == [wire.RUN]  # an idle child gets it at once
    assert h.pool.dispatch(job(2), 4) and h.pool.dispatch(job(3), 4)
    assert len(h.sent(pid)) == 1  # behind a job: they wait for push
    writes = len(h.os.written[h.child(pid).write_fd])
    h.pool.push()
    assert [wire.decode(f).id for f in h.sent(pid)] == [1, 2, 3]
    assert len(h.os.written[h.child(pid).write_fd]) > writes


def test_deadlines_run_from_start_and_move_to_the_next_job_at_its_start():
    h, pid = one_child(heartbeat_timeout=5.0)
    queued(h, 1, 2, timeout=2.0)
    h.clock.now += 1.0
    h.says(pid, wire.Start(1).encode())
    child = h.child(pid)
    assert child.job_deadline == h.clock.now + 2.0
    h.clock.now += 1.5
    h.says(pid, wire.Done(1, b"null").encode() + wire.Start(2).encode())
    assert child.job.id == 2 and child.started and child.job_deadline == h.clock.now + 2.0
    assert [type(o) for o in h.take()] == [JobStarted, JobDone, JobStarted]


def test_an_answer_for_a_queued_job_not_at_the_head_is_dropped(caplog):
    h, pid = one_child()
    queued(h, 1, 2)
    h.says(pid, wire.Start(1).encode())
    h.take()
    h.says(pid, wire.Done(2, b'"early"').encode())  # job 2 has not even started
    assert h.take() == [] and h.child(pid).job.id == 1
    assert "answered for job 2 while running job 1" in caplog.text
    h.says(pid, wire.Done(1, b"1").encode() + wire.Start(2).encode()
           + wire.Done(2, b"2").encode())
    assert [(type(o), o.job.id) for o in h.take()] == [(JobDone, 1), (JobStarted, 2),
                                                        (JobDone, 2)]


def test_a_start_out_of_order_is_ignored():
    h, pid = one_child()
    queued(h, 1, 2)
    h.says(pid, wire.Start(2).encode())
    assert h.take() == [] and not h.child(pid).started


def test_a_start_that_crossed_a_skip_gets_the_child_killed_and_nothing_runs_on():
    h, pid = one_child()
    queued(h, 1, 2, 3)
    h.says(pid, wire.Start(1).encode())
    assert h.pool.cancel(2)
    assert [f.type for f in h.sent(pid)][-1] == wire.SKIP
    (gone,) = [o for o in h.take() if isinstance(o, JobReturned)]
    assert (gone.job.id, gone.keep) == (2, False)
    h.says(pid, wire.Done(1, b"null").encode() + wire.Start(2).encode())
    assert h.signals_to(pid) == [signal.SIGKILL]
    h.exits(pid, signal.SIGKILL)
    assert [(o.job.id, o.keep) for o in h.take() if isinstance(o, JobReturned)] == [(3, True)]


def test_cancelling_the_only_queued_job_of_an_unstarted_head_frees_the_child():
    h, _pid = one_child()
    queued(h, 1)
    assert h.pool.cancel(1)
    assert h.pool.idle_count() == 1 and h.pool.held_count() == 0


def test_a_start_that_crossed_stop_makes_the_child_busy_until_that_job_ends():
    h, pid = one_child(kill_grace=3.0)
    queued(h, 1)  # sent to an idle child; its START is on the way
    h.pool.stop()
    child = h.child(pid)
    assert child.state == "stopping" and child.exit_deadline is not None
    h.says(pid, wire.Start(1).encode())  # it took job 1 before it read STOP
    assert child.state == "busy" and child.exit_deadline is None
    h.advance(4.0)
    assert h.signals_to(pid) == []  # no SIGKILL for the job it runs
    h.says(pid, wire.Done(1, b"null").encode())
    assert child.state == "stopping" and [f.type for f in h.sent(pid)].count(wire.STOP) == 1


def test_retiring_a_busy_child_sends_stop_and_gives_back_only_what_it_never_started():
    # Jobs taken back with SKIP when the child is retired ran twice in the kill storm:
    # done with its head, the child had already run them when the SKIP arrived. Only
    # its exit proves which ones it never started.
    h, pid = one_child()
    running_with_two_queued(h, pid)
    h.pool.stop()
    sent = [f.type for f in h.sent(pid)]
    assert sent[-1] == wire.STOP and wire.SKIP not in sent
    assert h.take(JobReturned) == []  # nothing comes back before the child says how far
    # It had finished job 1 and taken job 2 before it read STOP: job 2 runs and counts.
    h.says(pid, wire.Done(1, b"null").encode() + wire.Start(2).encode())
    h.says(pid, wire.Done(2, b"null").encode())
    assert h.signals_to(pid) == []  # a job that crossed STOP is not a reason to kill
    h.exits(pid, 0)
    outcomes = h.take()
    assert sorted(o.job.id for o in outcomes if isinstance(o, JobDone)) == [1, 2]
    assert [(o.job.id, o.keep) for o in outcomes if isinstance(o, JobReturned)] == [(3, True)]


def test_a_paused_queues_jobs_come_back_only_when_the_child_says_it_dropped_them():
    h, pid = one_child()
    running_with_two_queued(h, pid)
    assert h.pool.take_back("default") == 2
    assert [f.type for f in h.sent(pid)][-2:] == [wire.SKIP, wire.SKIP]
    assert h.take(JobReturned) == [] and h.pool.held_count() == 3
    h.says(pid, wire.Done(1, b"null").encode() + wire.Skipped(2).encode()
           + wire.Skipped(3).encode())
    outcomes = h.take()
    assert [(o.job.id, o.release) for o in outcomes if isinstance(o, JobReturned)] == [
        (2, True), (3, True)]
    assert h.pool.held_count() == 0 and h.pool.idle_count() == 1


def test_a_paused_queues_job_the_child_took_first_runs_and_is_not_given_back():
    # The race that a SKIP taken at its word lost: done with job 1, the child had
    # already taken job 2 when the SKIP arrived. Job 2 runs, once; only job 3 comes back.
    h, pid = one_child()
    running_with_two_queued(h, pid)
    assert h.pool.take_back("default") == 2
    h.says(pid, wire.Done(1, b"null").encode() + wire.Start(2).encode())
    h.says(pid, wire.Done(2, b"null").encode() + wire.Skipped(3).encode())
    outcomes = h.take()
    assert sorted(o.job.id for o in outcomes if isinstance(o, JobDone)) == [1, 2]
    assert [o.job.id for o in outcomes if isinstance(o, JobReturned)] == [3]
    assert h.signals_to(pid) == []  # taking it first is no fault: nothing is killed
    assert h.pool.idle_count() == 1


def test_a_recalled_job_still_queued_when_its_child_dies_is_released_not_rerun_here():
    h, pid = one_child()
    queued(h, 1, 2)
    h.says(pid, wire.Start(1).encode())
    h.take()
    assert h.pool.take_back("default") == 1
    h.exits(pid, -9)
    returned = [o for o in h.take() if isinstance(o, JobReturned)]
    assert [(o.job.id, o.keep, o.release) for o in returned] == [(2, True, True)]


def test_a_child_holds_no_more_than_its_job_limit():
    h, _pid = one_child(max_jobs_per_child=3, max_jobs_jitter=0.0)
    queued(h, 1, 2, 3, depth=8)
    assert not h.pool.dispatch(job(4), 8)


def test_own_queue_tops_up_only_children_running_that_queue_never_an_idle_one():
    h = Harness(auto_start=False, size=2)
    h.pool.start()
    h.ready()
    a = ClaimedJob(1, "pool_noop", "images", 1, 5, 0, None, "{}")
    assert h.pool.dispatch(a, 4)
    b = ClaimedJob(2, "pool_noop", "mail", 1, 5, 0, None, "{}")
    assert not h.pool.dispatch(b, 4, own_queue=True)  # the idle child is not for top-ups
    c = ClaimedJob(3, "pool_noop", "images", 1, 5, 0, None, "{}")
    assert h.pool.dispatch(c, 4, own_queue=True)
    assert h.pool._in_flight[3] is h.pool._in_flight[1] and h.pool.idle_count() == 1


def test_args_too_large_count_as_started_and_failed_so_no_job_is_left_in_a_pipe():
    from supervisor.engine.ledger import Ledger
    from supervisor.pool import JobFailed

    h, _pid = one_child(max_frame_bytes=200)
    big = ClaimedJob(1, "pool_noop", "default", 1, 5, 0, None, '{"a": "' + "x" * 300 + '"}')
    ledger = Ledger()
    assert h.pool.dispatch(big, 4)
    ledger.sent(big)
    for outcome in h.take():
        if isinstance(outcome, JobStarted):
            ledger.started(outcome.job)
        elif isinstance(outcome, JobFailed):
            ledger.ended(outcome.job, "failed")
    assert ledger.idle() and ledger.outstanding() == {}

"""Pipelined children with real processes: a child runs the jobs queued in its pipe back
to back and says START for each; what is queued behind its running job never starts
when the child crashes, times out, is cancelled, drained or recycled, and comes back
unstarted (``JobReturned``) for another child. Tests wait for outcomes, never for a
fixed time."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pool_handlers  # noqa: F401  (handlers are imported before forking, as --app does)
import pytest
from pool_driver import Driver, drivers_made

from shared.jobs import ClaimedJob
from supervisor.pool import JobDone, JobFailed, JobReturned, JobStarted

pytestmark = pytest.mark.timeout(30)
_make_driver = pytest.fixture(name="make_driver")(drivers_made)


class Work:
    """A note file that proves which jobs ran, and a release file for held jobs."""

    def __init__(self, tmp_path: Path) -> None:
        self.notes = tmp_path / "notes"
        self.release = tmp_path / "release"

    def ran(self) -> list[int]:
        if not self.notes.exists():
            return []
        return [int(line.split()[1]) for line in self.notes.read_text().splitlines()]

    def hold(self, d: Driver, timeout: float | None = None) -> ClaimedJob:
        return d.job("pool_hold", f'{{"path": "{self.notes}", "release": "{self.release}"}}',
                     timeout)

    def note(self, d: Driver) -> ClaimedJob:
        return d.job("pool_note", f'{{"path": "{self.notes}"}}')


@pytest.fixture(name="work")
def _work(make_driver, tmp_path):
    work = Work(tmp_path)
    yield work
    work.release.touch()  # no held job outlives its test


def of(d: Driver, kind: type) -> list:
    return [o for o in d.outcomes if isinstance(o, kind)]


def started(d: Driver, job: ClaimedJob) -> bool:
    return any(o.job.id == job.id for o in of(d, JobStarted))


def queue_behind_a_held_job(d: Driver, work: Work, behind: int = 2,
                            timeout: float | None = None):
    """One job running in the only child, ``behind`` more queued in its pipe."""
    held = work.hold(d, timeout)
    queued = [work.note(d) for _ in range(behind)]
    for job in (held, *queued):
        assert d.pool.dispatch(job, depth=1 + behind)
    d.pool.push()
    d.until(lambda: started(d, held) and work.ran() == [held.id])
    assert d.pool.idle_count() == 0 and d.pool.held_count() == 1 + behind
    return held, queued


def returned_ids(d: Driver) -> list[int]:
    return [o.job.id for o in of(d, JobReturned)]


def test_a_child_runs_its_queue_back_to_back_starting_each_job_in_order(make_driver, work):
    d = make_driver(size=1)
    jobs = [work.note(d) for _ in range(8)]
    for job in jobs:
        assert d.pool.dispatch(job, depth=8)
    assert not d.pool.dispatch(work.note(d), depth=8)  # its pipe is full
    d.pool.push()
    d.until(lambda: len(of(d, JobDone)) == 8)
    ids = [j.id for j in jobs]
    assert [o.job.id for o in of(d, JobStarted)] == ids
    assert [o.job.id for o in of(d, JobDone)] == ids == work.ran()
    assert d.pool.idle_count() == 1 and d.pool.held_count() == 0


def test_an_idle_child_comes_before_a_queue_and_a_long_job_gets_a_child_alone(make_driver):
    d = make_driver(size=2)
    first, second = d.job("pool_sleep", '{"seconds": 0.2}'), d.job("pool_noop")
    assert d.pool.dispatch(first, depth=4) and d.pool.dispatch(second, depth=4)
    assert d.pool.idle_count() == 0 and d.pool.busy_count() == 2  # one each
    assert d.pool.dispatch(d.job("pool_noop"), depth=4)  # behind one of them
    # Behind the sleeping one it is recalled once that one overran (issue 28): the pool
    # hands it back for the loop to give to another child.
    d.until(lambda: len(of(d, JobDone)) + len(of(d, JobReturned)) == 3)
    for back in of(d, JobReturned):
        assert d.pool.dispatch(back.job, depth=4)
    d.pool.push()
    d.until(lambda: len(of(d, JobDone)) == 3)
    lone = d.job("pool_sleep", '{"seconds": 0.3}')
    assert d.pool.dispatch(lone, depth=1)  # a long job: a child to itself
    assert d.pool.dispatch(d.job("pool_noop"), depth=4)  # the other, idle child
    assert d.pool.dispatch(d.job("pool_noop"), depth=4)  # behind the short one
    assert not d.pool.dispatch(d.job("pool_noop"), depth=1)  # never behind anything
    d.until(lambda: len(of(d, JobDone)) == 6)
    assert d.pool.idle_count() == 2


def test_sigkill_fails_the_running_job_and_returns_the_queued_ones_unstarted(make_driver, work):
    d = make_driver(size=1)
    held, queued = queue_behind_a_held_job(d, work, behind=3)
    pid = d.pool._in_flight[held.id].pid
    os.kill(pid, signal.SIGKILL)
    d.until(lambda: len(of(d, JobReturned)) == 3)
    (failed,) = of(d, JobFailed)
    assert (failed.job.id, failed.kind) == (held.id, "crashed")
    assert returned_ids(d) == [j.id for j in queued]
    assert all(o.keep for o in of(d, JobReturned))
    assert work.ran() == [held.id]  # none of the queued ones started
    assert d.pool.held_count() == 0
    # Another child takes them, same attempt: each runs exactly once.
    d.until(lambda: d.pool.idle_count() == 1)
    for job in queued:
        assert d.pool.dispatch(job, depth=3)
    d.pool.push()
    d.until(lambda: len(of(d, JobDone)) == 3)
    assert sorted(work.ran()) == sorted([held.id] + [j.id for j in queued])


def test_a_timeout_kills_only_the_running_job_and_returns_the_queued_ones(make_driver, work):
    d = make_driver(size=1)
    held, queued = queue_behind_a_held_job(d, work, behind=2, timeout=0.3)
    d.until(lambda: len(of(d, JobReturned)) == 2)
    (failed,) = of(d, JobFailed)
    assert (failed.job.id, failed.kind) == (held.id, "timeout")
    assert returned_ids(d) == [j.id for j in queued] and work.ran() == [held.id]


def test_a_cancelled_queued_job_never_runs_and_the_rest_go_on(make_driver, work):
    d = make_driver(size=1)
    held, (cancelled, after) = queue_behind_a_held_job(d, work, behind=2)
    assert d.pool.cancel(cancelled.id)
    d.until(lambda: of(d, JobReturned))
    (gone,) = of(d, JobReturned)
    assert (gone.job.id, gone.keep) == (cancelled.id, False)
    work.release.touch()
    d.until(lambda: len(of(d, JobDone)) == 2)
    assert [o.job.id for o in of(d, JobDone)] == [held.id, after.id]
    assert work.ran() == [held.id, after.id]
    assert of(d, JobFailed) == [] and d.pool.alive() == 1  # nobody was killed


def test_cancelling_the_running_job_kills_its_child_and_returns_the_queue(make_driver, work):
    d = make_driver(size=1)
    held, queued = queue_behind_a_held_job(d, work, behind=2)
    assert d.pool.cancel(held.id)
    d.until(lambda: len(of(d, JobReturned)) == 2)
    (failed,) = of(d, JobFailed)
    assert (failed.job.id, failed.kind) == (held.id, "cancelled")
    assert returned_ids(d) == [j.id for j in queued] and work.ran() == [held.id]


def test_drain_lets_the_running_job_finish_and_starts_none_of_the_queued(make_driver, work):
    d = make_driver(size=1)
    held, queued = queue_behind_a_held_job(d, work, behind=3)
    d.pool.stop()
    work.release.touch()
    d.until(lambda: d.pool.alive() == 0)
    assert [o.job.id for o in of(d, JobDone)] == [held.id]
    assert returned_ids(d) == [j.id for j in queued]
    assert work.ran() == [held.id]
    assert of(d, JobFailed) == []


def test_a_child_told_stop_with_jobs_queued_never_starts_them(make_driver, work):
    # RUN frames and STOP reach an idle child in one write: it starts none of them.
    d = make_driver(size=1)
    child = next(iter(d.pool._children.values()))
    jobs = [work.note(d) for _ in range(3)]
    d.pool._idle.clear()
    child.state = "busy"
    for job in jobs:
        child.jobs.append(job)
        child.sent += 1
        d.pool._in_flight[job.id] = child
    child.outgoing.extend(_run_frame(job) for job in jobs)
    child.tell_stop()  # one write: three RUN frames, then STOP
    d.pool.stop()
    d.until(lambda: d.pool.alive() == 0)
    assert work.ran() == [] and of(d, JobStarted) == []
    assert sorted(returned_ids(d)) == [j.id for j in jobs]


def _run_frame(job: ClaimedJob) -> bytes:
    from shared import wire

    return wire.Run.pack(job.id, job.kind, job.queue, job.attempt, job.max_attempts,
                         job.args_json)


def test_a_recycled_child_hands_its_queue_to_its_replacement(make_driver, work):
    d = make_driver(size=1, max_jobs_per_child=2, max_jobs_jitter=0.0)
    jobs = [work.note(d) for _ in range(2)]
    for job in jobs:
        assert d.pool.dispatch(job, depth=8)
    assert not d.pool.dispatch(work.note(d), depth=8)  # never past its job limit
    d.pool.push()
    d.until(lambda: len(d.events("recycled")) == 1 and d.pool.idle_count() == 1)
    assert work.ran() == [j.id for j in jobs] and of(d, JobReturned) == []


def test_a_paused_queue_takes_back_what_children_hold_queued(make_driver, work):
    d = make_driver(size=1)
    held, queued = queue_behind_a_held_job(d, work, behind=3)
    assert d.pool.take_back("default") == 3  # not the running one
    # They stay the child's until it says it dropped them: it reads the SKIPs before it
    # takes the next job, and says SKIPPED with the running job's answer.
    work.release.touch()
    d.until(lambda: d.pool.idle_count() == 1)
    returned = of(d, JobReturned)
    assert [(o.job.id, o.keep, o.release) for o in returned] == [
        (j.id, True, True) for j in queued]
    assert work.ran() == [held.id] and d.pool.held_count() == 0

"""When the pool asks the loop to wake (issue 43): for a deadline a child still
carries, never for one of a job that has already ended. At 100 ms jobs the overrun
watch of each job was left behind as a pool-wide "possibly early" time when the job
ended first, and 86 of about 107 timer wakes found nothing to do.

The heap itself is checked against a fake child; the pool's use of it over the fake
OS of ``pool_fakes``: the next deadline after a job ends early is the next job's, a
deadline moved later by a heartbeat is not woken for, and every deadline that is
still set (overrun, heartbeat, job timeout, exit, respawn) is still met on time."""

from __future__ import annotations

import random
import signal

import pytest
from pool_fakes import signalled, started

from shared import wire
from shared.jobs import ClaimedJob
from supervisor.pool import JobDone
from supervisor.pool.deadlines import Deadlines
from supervisor.tuning import DEFAULT

pytestmark = pytest.mark.timeout(10)

MIN_OVERRUN = DEFAULT.min_overrun


class Watched:
    """A child whose deadline the test sets."""

    def __init__(self, when: float | None) -> None:
        self.when = when

    def deadline(self) -> float | None:
        return self.when


def test_the_next_time_is_the_earliest_deadline_still_set():
    heap: Deadlines[Watched] = Deadlines()
    a, b = Watched(1.0), Watched(2.0)
    heap.arm(a, 1.0)
    heap.arm(b, 2.0)
    assert heap.next() == 1.0
    a.when = 3.0  # a's deadline moved later without an arm (a heartbeat came)
    assert heap.next() == 2.0
    b.when = None  # b's job ended: it carries no deadline
    assert heap.next() == 3.0
    heap.forget(a)
    assert heap.next() is None


def test_an_earlier_arm_replaces_the_later_entry():
    heap: Deadlines[Watched] = Deadlines()
    a = Watched(5.0)
    heap.arm(a, 5.0)
    a.when = 1.0
    heap.arm(a, 1.0)
    heap.arm(a, 4.0)  # later than its entry: nothing added
    assert heap.next() == 1.0
    assert heap.due(0.5) == []
    assert heap.due(1.0) == [a]
    a.when = None
    heap.rearm([a])
    assert heap.next() is None and len(heap) == 0  # the replaced entry was dropped too


def test_due_takes_every_child_whose_time_has_come_earliest_first():
    heap: Deadlines[Watched] = Deadlines()
    children = [Watched(t) for t in (3.0, 1.0, 2.0, 9.0)]
    heap.rearm(children)
    assert heap.due(3.0) == [children[1], children[2], children[0]]
    assert heap.next() == 9.0
    assert heap.due(3.0) == []  # taken out until armed again
    heap.rearm(children[:3])
    assert heap.next() == 1.0


def test_the_pools_own_time_is_met_and_cleared_once_passed():
    heap: Deadlines[Watched] = Deadlines()
    child = Watched(4.0)
    heap.arm(child, 4.0)
    heap.arm_pool(2.0)
    heap.arm_pool(3.0)  # later than the one armed: the earlier one stands
    assert heap.next() == 2.0
    assert heap.due(2.0) == []
    assert heap.next() == 4.0


def test_a_stream_of_moved_deadlines_keeps_one_live_entry_per_child():
    heap: Deadlines[Watched] = Deadlines()
    child = Watched(0.0)
    for step in range(1000):
        child.when = step + 0.2
        heap.arm(child, child.when)  # each job's watch, later than the last
        assert heap.next() == step + 0.2
    assert len(heap) == 1


def test_against_a_recount_of_every_child_in_a_random_life():
    """Thousands of random moves (later without an arm, earlier with one, a child
    dropping its deadline, reaped, or new), against the plain recount the heap
    replaces: the same next time at every step, the same children due, none late."""
    rng = random.Random(43)
    heap: Deadlines[Watched] = Deadlines()
    live: list[Watched] = []
    now = 0.0
    for _ in range(5_000):
        move = rng.random()
        if move < 0.15 or not live:
            child = Watched(now + rng.uniform(0.0, 2.0))
            live.append(child)
            heap.arm(child, child.when)
        elif move < 0.45:
            child = rng.choice(live)
            if child.when is not None:
                child.when += rng.uniform(0.0, 1.0)  # a heartbeat, a job that ended
        elif move < 0.6:
            child = rng.choice(live)
            child.when = now + rng.uniform(0.0, 1.0)  # a new job's watch, armed
            heap.arm(child, child.when)
        elif move < 0.65:
            rng.choice(live).when = None  # idle
        elif move < 0.7:
            child = live.pop(rng.randrange(len(live)))
            heap.forget(child)
        else:
            now += rng.uniform(0.0, 0.3)
            expected = sorted((c for c in live if c.when is not None and c.when <= now),
                              key=lambda c: c.when or 0.0)
            found = heap.due(now)
            assert {id(c) for c in found} == {id(c) for c in expected}
            assert [c.when for c in found] == [c.when for c in expected]  # earliest first
            for child in found:  # acted on: the next deadline is later
                child.when = now + rng.uniform(0.01, 1.0)
            heap.rearm(found)
        recount = min((c.when for c in live if c.when is not None), default=None)
        assert heap.next() == recount
    assert len(heap) <= 3 * len(live) + 1


# -- the pool -------------------------------------------------------------------------

def job(job_id: int, timeout: float | None = None) -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", "default", 1, 5, 0, timeout, "{}")


def two_ready(**overrides):
    h = started(size=2, **overrides)
    first, second = h.pids()
    return h, first, second


def test_a_job_that_ends_before_its_overrun_watch_leaves_no_wake_behind():
    h, _, _ = two_ready()
    assert h.pool.dispatch(job(1), 1)
    pid = h.pool._in_flight[1].pid
    started = h.clock.now
    assert h.pool.next_deadline() == pytest.approx(started + MIN_OVERRUN)
    h.advance(MIN_OVERRUN * 0.6)
    h.says(pid, wire.Done(1, b"null").encode())
    assert [o.job.id for o in h.take(JobDone)] == [1]
    # Idle now: the pool needs no look at it at all (the first job's watch was
    # what the loop woke for, for nothing).
    assert h.pool.next_deadline() is None
    h.advance(MIN_OVERRUN * 0.2)
    assert h.pool.dispatch(job(2), 1)
    watch = h.pool.run_times.overrun_after("pool_noop")  # job 1's run counts now
    assert h.pool.next_deadline() == pytest.approx(h.clock.now + watch)


def test_a_heartbeat_moves_the_wake_to_the_new_heartbeat_deadline():
    # One child: no overrun watch, so the heartbeat is its first deadline.
    h = started(size=1, heartbeat_timeout=5.0)
    assert h.pool.dispatch(job(1), 1)
    pid = h.pool._in_flight[1].pid
    t0 = h.clock.now
    assert h.pool.next_deadline() == pytest.approx(t0 + 5.0)
    h.advance(4.0)
    h.says(pid, wire.Heartbeat(1).encode())
    assert h.pool.next_deadline() == pytest.approx(t0 + 9.0)
    h.advance(4.5)  # past the first heartbeat deadline: nothing is judged
    assert h.os.signals == []


def test_the_deadlines_still_set_are_met_on_time():
    h, _, _ = two_ready(heartbeat_timeout=5.0)
    assert h.pool.dispatch(job(1, timeout=2), 1)
    assert h.pool.dispatch(job(2), 1)
    timed, silent = h.pool._in_flight[1].pid, h.pool._in_flight[2].pid
    t0 = h.clock.now
    for t in (0.5, 1.0, 1.5):
        h.advance(0.5)
        h.says(timed, wire.Heartbeat(1).encode())
        h.says(silent, wire.Heartbeat(2).encode())
        assert h.os.signals == [], t
    assert h.pool.next_deadline() == pytest.approx(t0 + 2.0)  # job 1's timeout
    h.advance(0.5)
    assert signal.SIGTERM in h.signals_to(timed)
    assert signal.SIGKILL not in h.signals_to(timed)
    # The kill's grace is armed for the timed child; the silent one's heartbeat
    # deadline (1.5 + 5.0) still stands behind it.
    assert h.pool.next_deadline() == pytest.approx(t0 + 2.0 + 3.0)
    h.advance(3.0)
    assert signal.SIGKILL in h.signals_to(timed)
    assert h.signals_to(silent) == []
    h.exits(timed, signalled(signal.SIGKILL))
    assert h.pool.next_deadline() == pytest.approx(t0 + 6.5)


def test_a_reaped_child_leaves_no_deadline_behind():
    h, first, second = two_ready()
    assert h.pool.dispatch(job(1), 1)
    pid = h.pool._in_flight[1].pid
    h.exits(pid, signalled(signal.SIGKILL))
    h.take()
    due = h.pool.next_deadline()
    # What is left: the replacement's boot deadline, nothing of the reaped child's.
    replacement = [p for p in h.pids() if p not in (first, second)]
    assert replacement and due == pytest.approx(h.child(replacement[0]).boot_deadline)

"""A fair queue's newly arrived batch runs its first job next (issue 42), in its two
parts, against fakes: the scheduler claims one job for a fair queue a NOTIFY woke even
with its pipes full (and not when nothing could run it), claims at once for a batch the
notice named that this supervisor holds no job of, and the pool's ``make_way`` has
the child whose head started first give back what is queued behind it, unless its next
job is itself a batch's only one. A fair queue whose claims come back full is known
busy, which spares its poll. Through real supervisors: tests/test_fair_run.py."""

from __future__ import annotations

from collections import Counter

import pytest
from fairsim import Clock
from pool_fakes import Harness

from shared import wire
from shared.jobs import ClaimedJob
from supervisor.config import RunConfig
from supervisor.engine.planner import Scheduler
from supervisor.pool import JobReturned
from supervisor.queue_policy import QueuePolicy

pytestmark = pytest.mark.timeout(10)


def scheduler(fair: str | None = "batch", prefetch: int | None = 4) -> Scheduler:
    config = RunConfig(children=2, queue_policies={
        "q": QueuePolicy("q", prefetch=prefetch, fair=fair)})
    return Scheduler(config, ["q"], 0.0, clock=Clock())


FULL = {"q": 8}  # two children, four jobs each: no room for a claim


def test_a_woken_fair_queue_with_full_pipes_claims_one_job():
    s = scheduler()
    s.wake(["q"])
    assert s.plan_claims(0.0, 2, FULL, {"q": 6}) == [("q", 1)]


def test_the_scout_is_used_once_per_wake():
    s = scheduler()
    s.wake(["q"])
    s.plan_claims(0.0, 2, FULL, {"q": 6})
    s.claimed("q", 1, 1)
    assert s.plan_claims(0.0, 2, {"q": 9}, {"q": 7}) == []


def test_with_one_job_per_child_the_scout_waits_for_the_first_child_to_end():
    # Its job waits here, not in a pipe: the first child to end takes it, with no claim's
    # round trip between (B's first start within one job length at -n 2, 145 ms jobs).
    s = scheduler(prefetch=1)
    s.wake(["q"])
    assert s.plan_claims(0.0, 2, {"q": 2}, {}) == [("q", 1)]


@pytest.mark.parametrize("case", ["plain queue", "one more per child held already",
                                  "every child stuck"])
def test_no_scout(case):
    s = scheduler(fair=None if case == "plain queue" else "batch")
    outstanding = {"q": 10} if case == "one more per child held already" else FULL
    s.wake(["q"])
    size = 0 if case == "every child stuck" else 2
    assert s.plan_claims(0.0, size, outstanding, {"q": 6}) == []


ROOM_FOR_ONE = {"q": 7}  # a window of 8 with one job ended: below half of it


def test_with_room_below_half_the_window_a_wake_waits_for_more_room():
    # A producer's stream of notices must not break the queue's claims into small ones.
    s = scheduler()
    s.wake(["q"], {"q": {7}}, held=lambda queue: {7})
    assert s.plan_claims(0.0, 2, ROOM_FOR_ONE, {"q": 5}) == []


def test_a_batch_held_nowhere_here_is_claimed_with_what_room_there_is():
    # Waiting for half the window held B's first job back 1-2 job lengths (19 ms jobs).
    s = scheduler()
    # Named beside a batch held here (a released member of 7 told in the same turn).
    s.wake(["q"], {"q": {7, 8}}, held=lambda queue: {7})
    assert s.plan_claims(0.0, 2, ROOM_FOR_ONE, {"q": 5}) == [("q", 1)]
    s.claimed("q", 1, 1)
    # Once: the next notice of the same batch finds it held.
    s.wake(["q"], {"q": {8}}, held=lambda queue: {7, 8})
    assert s.plan_claims(0.0, 2, {"q": 7}, {"q": 5}) == []


@pytest.mark.parametrize("case", ["plain queue", "no batch named"])
def test_no_newcomer(case):
    s = scheduler(fair=None if case == "plain queue" else "batch")
    # A notice of jobs of no batch names none (``Database.take_named_batches``).
    batches = {"q": {8}} if case == "plain queue" else {}
    s.wake(["q"], batches, held=lambda queue: {7})
    assert s.plan_claims(0.0, 2, ROOM_FOR_ONE, {"q": 5}) == []


def test_a_queue_whose_claims_come_back_full_is_known_busy_until_one_comes_back_short():
    # The poll takes that word for a fair queue instead of reading it from the head of
    # the claim index (under a held horizon: every entry claimed since the hold began).
    s = scheduler()
    s.wake(["q"])
    asked = dict(s.plan_claims(0.0, 2, {}, {}))["q"]
    s.claimed("q", asked, asked)
    assert s.known_busy("q")
    s.claimed("q", 4, 1)
    assert not s.known_busy("q") and "q" not in s.demand


def job(job_id: int, batch: int | None) -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", "q", 1, 5, 0, None, "{}", batch_id=batch)


def busy(*pipes: list[ClaimedJob]) -> tuple[Harness, list[int]]:
    """One child per pipe, each running its pipe's first job (started in the pipes'
    order, a little apart) with the rest queued behind it."""
    h = Harness(auto_start=False, size=len(pipes))
    h.pool.start()
    h.ready()
    h.take()
    pids = []
    for pipe in pipes:
        assert h.pool.dispatch(pipe[0], 4)
        pid = h.pool._in_flight[pipe[0].id].pid
        h.says(pid, wire.Start(pipe[0].id).encode())
        h.advance(0.01)
        pids.append(pid)
    for pid, pipe in zip(pids, pipes, strict=True):
        child = h.child(pid)
        for queued in pipe[1:]:
            assert child.run(queued, 0.0, 4)
        h.pool._pushing.add(child)
        for queued in pipe[1:]:
            h.pool._in_flight[queued.id] = child
    h.pool.push()
    h.take()
    return h, pids


def skips(h: Harness, pid: int) -> list[int]:
    return [wire.Skip.decode(f).job for f in h.sent(pid) if f.type == wire.SKIP]


def test_the_child_whose_job_started_first_gives_back_its_queue():
    h, (a, b) = busy([job(1, 7), job(2, 7), job(3, 7)], [job(11, 7), job(12, 7)])
    held = h.pool.batch_counts("q")
    assert held == Counter({7: 5})
    assert h.pool.make_way("q", held)
    assert skips(h, a) == [2, 3] and skips(h, b) == []
    # While those are on their way back, nothing more is asked: the way is being made.
    assert h.pool.make_way("q", held)
    assert skips(h, b) == []
    h.says(a, b"".join(wire.Skipped(i).encode() for i in (2, 3)))
    assert [(o.job.id, o.release) for o in h.take(JobReturned)] == [(2, False), (3, False)]
    # Back: the newcomer's place, right after a's running job, is free.
    assert h.pool.dispatch(job(21, 8), 2)
    assert [j.id for j in h.child(a).jobs] == [1, 21]


def test_an_earlier_newcomers_place_is_kept():
    # a's next job is batch 8's only one (a newcomer placed there before): b gives way.
    h, (a, b) = busy([job(1, 7), job(2, 8), job(3, 7)], [job(11, 7), job(12, 7)])
    assert h.pool.make_way("q", h.pool.batch_counts("q"))
    assert skips(h, a) == [] and skips(h, b) == [12]


def test_no_way_is_made_when_every_next_job_is_a_batchs_only_one():
    h, (a, b) = busy([job(1, 7), job(2, 8)], [job(11, 7), job(12, 9)])
    assert not h.pool.make_way("q", h.pool.batch_counts("q"))
    assert skips(h, a) == [] and skips(h, b) == []

"""The pool's recall for a queue owed a child (issue 44) and the stuck children's jobs
(issue 49), against a fake OS: with no child idle, a child running a queue above its
share gives back every job queued behind the one it runs (SKIP, not released); one
child per child owed, the longest-running first, none twice; and the jobs an
overrunning child runs are named per queue for the claim to leave out."""

from __future__ import annotations

import pytest
from pool_fakes import Harness

from shared import wire
from shared.jobs import ClaimedJob
from supervisor.pool import JobReturned
from supervisor.tuning import DEFAULT

MIN_OVERRUN = DEFAULT.min_overrun

pytestmark = pytest.mark.timeout(10)


def job(job_id: int, queue: str = "big") -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", queue, 1, 5, 0, None, "{}")


def two_busy_children() -> tuple[Harness, int, int]:
    """Two children of queue ``big``, each with jobs queued behind the one it runs:
    ``a`` (forked first, so first in the pool's order) started its job after ``b``."""
    h = Harness(auto_start=False, size=2)
    h.pool.start()
    h.ready()
    h.take()
    assert h.pool.dispatch(job(1), 4)
    a = h.pool._in_flight[1].pid
    assert h.pool.dispatch(job(11), 4)
    b = h.pool._in_flight[11].pid
    h.says(b, wire.Start(11).encode())
    h.advance(0.01)
    h.says(a, wire.Start(1).encode())
    for job_id in (2, 3, 12):
        assert h.pool.dispatch(job(job_id), 4, own_queue=True)
    h.pool.push()
    h.take()
    assert len(h.child(a).jobs) > 1 and len(h.child(b).jobs) > 1
    return h, a, b


def skips_sent(h: Harness, pid: int) -> list[int]:
    return [wire.Skip.decode(f).job for f in h.sent(pid) if f.type == wire.SKIP]


def test_one_child_per_child_owed_gives_back_its_pipe_longest_running_first():
    h, a, b = two_busy_children()
    queued = {pid: [j.id for j in h.child(pid).jobs][1:] for pid in (a, b)}
    assert sum(map(len, queued.values())) == 3
    asked = h.pool.free_for({"big"}, 1)
    assert asked == len(queued[b]) and skips_sent(h, b) == queued[b]  # b started first
    assert skips_sent(h, a) == []
    # Asked again while b's recalls are out: b counts as freeing, nothing more is sent.
    assert h.pool.free_for({"big"}, 1) == 0
    h.says(b, b"".join(wire.Skipped(i).encode() for i in queued[b]))
    back = h.take(JobReturned)
    assert [(o.job.id, o.keep, o.release) for o in back] == [(i, True, False)
                                                            for i in queued[b]]
    # Two owed: the other child gives its pipe back too.
    assert h.pool.free_for({"big"}, 2) == len(queued[a])


def test_a_queue_within_its_share_keeps_its_pipes():
    h, a, b = two_busy_children()
    assert h.pool.free_for({"other"}, 2) == 0
    assert skips_sent(h, a) == [] and skips_sent(h, b) == []


def test_the_jobs_of_overrunning_children_are_named_per_queue():
    h = Harness(auto_start=False, size=2)
    h.pool.start()
    h.ready()
    h.take()
    assert h.pool.dispatch(job(1, "slow"), 1)
    pid = h.pool._in_flight[1].pid
    h.says(pid, wire.Start(1).encode())
    assert h.pool.overrunning_heads() == {}
    h.advance(MIN_OVERRUN * 1.1)  # a kind never measured overruns at MIN_OVERRUN
    assert h.pool.overrunning_heads() == {"slow": 1}
    h.says(pid, wire.Done(1, b"null").encode())
    assert h.pool.overrunning_heads() == {}

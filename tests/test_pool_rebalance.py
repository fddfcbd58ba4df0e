"""The end of a queue (issue 31): a child stands idle while another holds jobs queued
behind the one it runs. ``Pool.rebalance`` asks the last half of them back for each idle
child (SKIP, as for an overrun), only for queues with nothing more to claim, and leaves a
lone job whose child is about to reach it where it is. Against a fake OS."""

from __future__ import annotations

import pytest
from pool_fakes import Harness

from shared import wire
from shared.jobs import ClaimedJob
from supervisor.pool import JobReturned
from supervisor.tuning import DEFAULT

pytestmark = pytest.mark.timeout(10)


def job(job_id: int, queue: str = "default") -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", queue, 1, 5, 0, None, "{}")


def skips_sent(h: Harness, pid: int) -> list[int]:
    return [wire.Skip.decode(f).job for f in h.sent(pid) if f.type == wire.SKIP]


def one_child_holding(queued: int = 2) -> tuple[Harness, int, int]:
    """Child ``a`` runs job 1 with ``queued`` jobs (2, 3, ...) behind it; child ``b``
    ran job 9 and is idle again."""
    h = Harness(auto_start=False, size=2)
    h.pool.start()
    h.ready()
    h.take()
    assert h.pool.dispatch(job(1), queued + 1)
    a = h.pool._in_flight[1].pid
    assert h.pool.dispatch(job(9), 1)
    b = h.pool._in_flight[9].pid
    h.says(a, wire.Start(1).encode())
    h.says(b, wire.Start(9).encode())
    for job_id in range(2, queued + 2):
        assert h.pool.dispatch(job(job_id), queued + 1)
    h.pool.push()
    h.says(b, wire.Done(9, b"null").encode())
    h.take()
    assert [j.id for j in h.child(a).jobs] == list(range(1, queued + 2))
    return h, a, b


def test_an_idle_child_gets_the_last_half_of_the_fullest_pipe():
    h, a, _ = one_child_holding()
    assert h.pool.rebalance(lambda queue: True) == 1
    assert skips_sent(h, a) == [3]
    # One idle child, one recall on its way: asked again, nothing more is recalled.
    assert h.pool.rebalance(lambda queue: True) == 0
    h.says(a, wire.Skipped(3).encode())
    back = h.take(JobReturned)
    assert [(o.job.id, o.keep, o.release) for o in back] == [(3, True, False)]


def test_nothing_is_recalled_while_its_queue_may_still_bring_work():
    h, a, _ = one_child_holding()
    assert h.pool.rebalance(lambda queue: False) == 0
    assert skips_sent(h, a) == []


def test_a_single_queued_job_its_child_is_about_to_reach_stays():
    h, a, _ = one_child_holding()
    # Job 2 is answered as soon as it was recalled and job 3 is the only one left...
    for _ in range(20):  # ...of a kind measured at 5 ms a run
        h.pool.run_times.ran("pool_noop", "default", DEFAULT.steal_min / 2)
    h.says(a, wire.Done(1, b"null").encode() + wire.Start(2).encode())
    h.take()
    assert [j.id for j in h.child(a).jobs] == [2, 3]
    assert h.pool.rebalance(lambda queue: True) == 0
    assert skips_sent(h, a) == []


def test_no_idle_child_no_recall():
    h, a, _ = one_child_holding()
    assert h.pool.dispatch(job(10), 1)  # the idle child is busy again
    h.pool.push()
    assert h.pool.rebalance(lambda queue: True) == 0
    assert skips_sent(h, a) == []


def test_half_of_a_longer_pipe_goes():
    h, a, _ = one_child_holding(queued=4)
    assert h.pool.rebalance(lambda queue: True) == 2
    assert skips_sent(h, a) == [4, 5]

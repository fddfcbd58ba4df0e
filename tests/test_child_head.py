"""The head record (``supervisor.pool.head.Head``, issue 41): what a child carries for
the job at the head of its pipe is made when that job reaches the head, its clocks
restarted at its START, and dropped at its answer, so nothing of one job (its notice,
its kill verdict, its overrun, its silence) reaches the next. A kill verdict passed on
the child outlives a head given back unstarted: it ends whichever job the child holds.
"""

from __future__ import annotations

import logging

import pytest
from pool_fakes import FakeOs, FakeSelector

from shared import wire
from shared.jobs import FAIL_ERROR, FAIL_MEMORY, ClaimedJob
from supervisor.pool import JobFailed, PoolSettings
from supervisor.pool.process import BUSY, ChildProcess, ChildState, Overdue

NOW = 100.0


def job(job_id: int, heartbeat_timeout: float | None = None) -> ClaimedJob:
    claimed = ClaimedJob(job_id, "pool_noop", "q", 1, 5, 0, 2.0, "{}")
    claimed.heartbeat_timeout = heartbeat_timeout
    return claimed


class Rig:
    def __init__(self) -> None:
        self.os = FakeOs()
        self.child = ChildProcess(42, 3, 10, 11, max_jobs=None, now=NOW,
                                  settings=PoolSettings(size=1, boot_timeout=10.0,
                                                        heartbeat_timeout=5.0,
                                                        kill_grace=3.0),
                                  oscalls=self.os, selector=FakeSelector(), tag=object(),
                                  log=logging.getLogger("test.head"))
        self.says(wire.Ready(42, 3))

    def says(self, *messages, now: float = NOW) -> list:
        for m in messages:
            self.os.inbox.setdefault(10, bytearray()).extend(m.encode())
        return self.child.read(now)


def two_queued() -> Rig:
    rig = Rig()
    rig.child.run(job(1), NOW)
    rig.child.run(job(2), NOW)
    rig.child.push()
    return rig


def test_a_head_is_made_on_arrival_and_its_clocks_restart_at_its_start():
    rig = two_queued()
    first = rig.child.head
    assert first is not None and first.job.id == 1 and not first.started
    assert (first.job_deadline, first.beat_deadline) == (NOW + 2.0, NOW + 5.0)
    first.cpu_seen, first.native = 1.5, True  # looked at while its START was awaited
    rig.says(wire.Start(1), now=NOW + 1)
    started = rig.child.head
    assert started is first and started.started and started.armed_at == NOW + 1
    assert (started.job_deadline, started.beat_deadline) == (NOW + 3.0, NOW + 6.0)
    assert (started.cpu_seen, started.native, started.alive_at) == (None, False, NOW + 1)


def test_nothing_of_an_answered_head_reaches_the_next_job():
    rig = two_queued()
    rig.says(wire.Start(1))
    head = rig.child.head
    assert rig.child.notify("memory", FAIL_MEMORY, "over its cap", NOW + 3.0) is not None
    head.overrun = True
    head.recall_at = NOW + 0.5
    rig.says(wire.Done(1, b"1"), wire.Start(2), now=NOW + 1)
    nxt = rig.child.head
    assert nxt.job.id == 2 and nxt.started
    assert (nxt.notice, nxt.kill, nxt.overrun, nxt.recall_at) == (None, None, False, None)
    assert not rig.child.overrun
    # A Stopping let out with no notice of its own is an ordinary error, not memory.
    (failed,) = rig.says(wire.Failed(2, "stopped", "let out"), now=NOW + 2)
    assert isinstance(failed, JobFailed) and failed.kind == FAIL_ERROR
    assert rig.child.head is None and rig.child.deadline() is None


def test_a_kill_verdict_outlives_a_head_given_back_unstarted():
    rig = two_queued()
    assert rig.child.recall(1, "queue q paused")
    rig.child.kill(15, NOW, FAIL_MEMORY, "over the container's limit")
    rig.says(wire.Skipped(1), wire.Start(2), now=NOW + 1)
    assert rig.child.head.job.id == 2 and rig.child.head.kill is not None
    (failed,) = rig.child.close(NOW + 2, "child 42 killed by signal 15")
    assert (failed.job.id, failed.kind, failed.message) == (
        2, FAIL_MEMORY, "over the container's limit")


def test_the_heartbeat_timeout_comes_with_the_job_else_the_pools():
    rig = Rig()
    rig.child.run(job(1, heartbeat_timeout=0.5), NOW)
    assert rig.child.beat_deadline == NOW + 0.5
    assert rig.child.overdue(NOW + 0.5) is Overdue.HEARTBEAT
    rig.says(wire.Done(1, b"1"))
    rig.child.become_idle()
    rig.child.run(job(2), NOW)
    assert rig.child.beat_deadline == NOW + 5.0


@pytest.mark.parametrize("state", list(ChildState))
def test_a_childs_state_reads_as_the_words_status_shows(state):
    assert state == state.value and f"{state}" == state.value


def test_a_busy_child_with_no_head_has_no_deadline():
    rig = Rig()
    rig.child.state = BUSY
    assert rig.child.deadline() is None and rig.child.overdue(NOW + 1e6) is None

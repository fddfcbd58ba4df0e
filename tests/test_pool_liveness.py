"""A silent child judged by its CPU time (issue 26): busy in native code that holds the
GIL is not hung; stopped, in uninterruptible sleep, or neither beating nor using CPU
is. The policy over a fake OS and clock; the real processes are in
test_pool_processes.py."""

from __future__ import annotations

import logging
import signal

from pool_fakes import signalled, started

from shared import wire
from shared.jobs import ClaimedJob
from shared.procfs import GroupSample
from supervisor.pool import ChildEvent, JobFailed


def job(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, "k", "default", 1, 5, 0, None, "{}")


def busy_child(h, cpu: float = 1.0, state: str = "R"):
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.os.sample_of[pid] = GroupSample(cpu, state)
    return pid


def hung(h, pid) -> JobFailed:
    assert h.signals_to(pid)[:1] == [signal.SIGTERM]
    h.exits(pid, signalled(signal.SIGTERM))
    (failed,) = h.take(JobFailed)
    assert failed.kind == "hung"
    return failed


def test_cpu_time_moving_keeps_a_silent_child_until_it_stops_moving():
    h = started(size=1)  # heartbeat_timeout 5 s: a look every 0.5 s once silent
    pid = busy_child(h)
    h.advance(5.0)  # silent: the first look takes the CPU baseline
    for _ in range(40):  # 20 s of silence, the CPU time moving 0.4 s per 0.5 s
        h.os.sample_of[pid] = GroupSample(h.os.sample_of[pid].cpu_seconds + 0.4, "R")
        h.advance(0.5)
    assert h.signals_to(pid) == []
    assert [o.what for o in h.take(ChildEvent)].count("native") == 1
    for _ in range(9):  # the CPU time stands still: 4.5 s is not yet the timeout
        h.advance(0.5)
    assert h.signals_to(pid) == []
    h.advance(0.5)
    assert hung(h, pid).message == "no heartbeat and no CPU time for 5.0 s"


def test_a_beat_after_native_work_starts_the_silence_over():
    h = started(size=1)
    pid = busy_child(h)
    h.advance(5.0)
    h.os.sample_of[pid] = GroupSample(3.0, "R")
    h.advance(0.5)
    h.says(pid, wire.Heartbeat(1).encode())  # back in Python: beating again
    h.advance(4.9)
    assert h.signals_to(pid) == []


def test_a_trickle_of_cpu_is_not_busy():
    # Threads waiting for the GIL wake now and then: a fraction of a percent of a CPU.
    h = started(size=1)
    pid = busy_child(h)
    h.advance(5.0)
    h.os.sample_of[pid] = GroupSample(1.01, "S")
    h.advance(0.5)
    assert hung(h, pid).message == "no heartbeat and no CPU time for 5.0 s"


def test_a_stopped_child_is_hung_at_its_deadline():
    h = started(size=1)
    pid = busy_child(h, state="T")
    h.advance(4.9)
    assert h.signals_to(pid) == []
    h.advance(0.1)
    assert hung(h, pid).message == "stopped (state T), no heartbeat for 5.0 s"


def test_uninterruptible_sleep_is_hung_even_if_cpu_time_moved():
    h = started(size=1)
    pid = busy_child(h, state="D")
    h.advance(5.0)
    h.os.sample_of[pid] = GroupSample(2.0, "D")
    h.advance(0.5)
    assert (hung(h, pid).message ==
            "in uninterruptible sleep (state D), no heartbeat for 5.0 s")


def test_no_procfs_falls_back_to_silence_with_one_warning(caplog):
    h = started(size=2)
    pids = h.pids()
    h.pool.dispatch(job(1))
    h.pool.dispatch(job(2))
    with caplog.at_level(logging.WARNING, logger="supervisor.pool"):
        # The parent wakes when the two heads overrun (it watches every head in a
        # pool of two); one jump of 5 s would look like a nap of the parent itself.
        h.advance(0.1)
        h.advance(4.9)
    for pid in pids:
        assert h.signals_to(pid)[:1] == [signal.SIGTERM]
    assert sum("cannot read /proc" in r.message for r in caplog.records) == 1

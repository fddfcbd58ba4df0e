"""The pool's guards at the edges, against the fake OS and clock: the memory cap while
a job runs and at its end, escapees of the group, boot deaths that are not the code's,
and a parent that was itself asleep."""

from __future__ import annotations

import signal

import pool_handlers  # noqa: F401  (registers the pool_* kinds the parent looks up)
import pytest
from pool_fakes import Harness, exited, signalled, started

from shared import wire
from shared.exitcodes import CHILD_BOOT_ERROR
from shared.jobs import FAIL_MEMORY, ClaimedJob
from supervisor.pool import ChildEvent, JobDone, JobFailed, PoolHalted

pytestmark = pytest.mark.timeout(10)
MIB = 1 << 20


def job(job_id: int = 1, timeout: float | None = None) -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", "default", 1, 5, 0, timeout, "{}")


def test_a_busy_child_over_the_memory_cap_is_killed_as_memory():
    h = started(size=1, max_memory_per_child=512 * MIB, memory_sample=0.25)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.os.rss_of[pid] = 400 * MIB
    h.advance(0.25)
    assert h.signals_to(pid) == []  # under the cap: sampled again later
    assert h.pool.next_deadline() == pytest.approx(h.clock.now + 0.25)
    h.os.rss_of[pid] = 2076 * MIB
    h.advance(0.25)
    assert h.signals_to(pid) == [signal.SIGKILL]
    h.exits(pid, signalled(signal.SIGKILL))
    (failed,) = h.take(JobFailed)
    assert (failed.kind, failed.terminal) == (FAIL_MEMORY, False)
    assert "2076 MiB passed the 512 MiB" in failed.message
    assert len(h.pids()) == 1  # replaced


def test_no_memory_cap_means_no_sampling_deadline():
    h = started(size=1)
    h.pool.dispatch(job(1))
    assert h.pool.next_deadline() == pytest.approx(h.clock.now + 5.0)  # the heartbeat's


def test_a_child_whose_peak_passed_the_cap_is_recycled_after_its_job():
    h = started(size=1, max_memory_per_child=512 * MIB)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.os.rss_of[pid] = 60 * MIB  # it gave the memory back before returning
    h.os.peak_of[pid] = 900 * MIB
    h.says(pid, wire.Done(1, b"null").encode())
    assert h.take(JobDone)
    assert h.pool.idle_count() == 0 and not h.pool.dispatch(job(2))
    assert [f.type for f in h.sent(pid)][-1] == wire.STOP


def test_a_child_under_its_peak_cap_stays():
    h = started(size=1, max_memory_per_child=512 * MIB)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.os.peak_of[pid] = 500 * MIB
    h.says(pid, wire.Done(1, b"null").encode())
    assert h.pool.idle_count() == 1


def test_a_kill_also_reaches_descendants_that_left_the_group():
    h = started(size=1)
    pid = h.pids()[0]
    h.os.escaped_of[pid] = [901, 902]
    h.pool.dispatch(job(1, timeout=2.0))
    h.advance(2.0)
    assert (901, signal.SIGKILL) in h.os.signals and (902, signal.SIGKILL) in h.os.signals
    assert h.signals_to(pid)[0] == signal.SIGTERM


def test_boot_deaths_by_an_outside_signal_respawn_with_backoff_and_never_halt():
    h = Harness(size=1, crash_loop_limit=3)
    h.pool.start()
    delays = []
    for _ in range(8):
        pid = h.pids()[0]
        h.exits(pid, signalled(signal.SIGKILL))  # killed from outside while booting
        h.pool.tick()
        assert h.pids() == []  # not at once: backoff
        waited = 0.0
        while not h.pids():
            step = h.pool.next_deadline() - h.clock.now
            assert step > 0
            waited += step
            h.advance(step)
        delays.append(round(waited, 3))
    assert h.pool.halted is None
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    h.ready()
    pid = h.pids()[0]
    h.pool.stop()
    assert h.pool.idle_count() == 0 and pid in h.pids()


def test_a_ready_child_ends_the_backoff():
    h = Harness(size=1)
    h.pool.start()
    for _ in range(3):
        h.exits(h.pids()[0], signalled(signal.SIGTERM))
        while not h.pids():
            h.advance(h.pool.next_deadline() - h.clock.now)
    h.ready()
    h.pool.resize(2)
    assert len(h.pids()) == 2  # forked at once


@pytest.mark.parametrize("status", [exited(CHILD_BOOT_ERROR), signalled(signal.SIGSEGV)],
                         ids=["boot-error-exit", "sigsegv"])
def test_boot_failures_of_the_code_still_halt(status):
    h = Harness(size=1, crash_loop_limit=3)
    h.pool.start()
    with pytest.raises(PoolHalted, match="crash loop"):
        for _ in range(5):
            h.exits(h.pids()[0], status)
            h.pool.tick()


def test_a_boot_timeout_counts_toward_the_crash_loop():
    h = Harness(size=1, crash_loop_limit=2, boot_timeout=1.0)
    h.pool.start()
    with pytest.raises(PoolHalted):
        for _ in range(3):
            pid = h.pids()[0]
            h.advance(1.0)
            h.exits(pid, signalled(signal.SIGKILL))  # our own kill at the boot deadline
            h.pool.tick()


def test_a_parent_that_slept_past_the_heartbeat_timeout_does_not_blame_its_children():
    h = started(size=2, heartbeat_timeout=5.0)
    first, second = h.pids()
    h.pool.dispatch(job(1))
    h.pool.dispatch(job(2))
    h.advance(20.0)  # one tick 15 s after it was due: the parent was stopped
    assert h.os.signals == [] and not h.take(JobFailed)
    h.advance(3.0)
    h.says(first, wire.Heartbeat(1).encode())
    h.advance(1.9)
    assert h.os.signals == []
    h.advance(0.2)  # but silence after waking is still silence
    assert h.signals_to(second)[0] == signal.SIGTERM and h.signals_to(first) == []


def test_a_parent_that_slept_gives_booting_children_their_time_back():
    h = Harness(size=1, boot_timeout=10.0, heartbeat_timeout=5.0)
    h.pool.start()
    pid = h.pids()[0]
    h.advance(30.0)
    assert h.signals_to(pid) == []
    h.ready()
    assert h.pool.idle_count() == 1 and "boot_failed" not in [
        o.what for o in h.take(ChildEvent)]


def test_a_tick_on_time_still_enforces_the_heartbeat():
    h = started(size=1, heartbeat_timeout=5.0)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.advance(5.0)
    assert h.signals_to(pid)[0] == signal.SIGTERM


def test_a_running_job_over_the_cap_is_told_first_and_killed_after_kill_grace():
    h = started(size=1, max_memory_per_child=512 * MIB, memory_sample=0.25, kill_grace=3.0)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.os.rss_of[pid] = 600 * MIB  # over the cap, under 1.5 times it
    h.advance(0.25)
    assert h.signals_to(pid) == []  # told (STOPPING), and STOP: no job after this one
    types = [f.type for f in h.sent(pid)]
    assert wire.STOPPING in types and wire.STOP in types
    assert not h.pool.dispatch(job(2))
    h.advance(2.5)
    assert h.signals_to(pid) == []  # still within its grace, still sampled
    h.advance(0.5)
    assert h.signals_to(pid) == [signal.SIGKILL]
    h.exits(pid, signalled(signal.SIGKILL))
    (failed,) = h.take(JobFailed)
    assert failed.kind == FAIL_MEMORY and "told to stop, killed after 3 s" in failed.message


def test_a_job_that_stops_itself_after_the_memory_notice_fails_as_memory_unkilled():
    h = started(size=1, max_memory_per_child=512 * MIB, memory_sample=0.25)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.os.rss_of[pid] = 600 * MIB
    h.advance(0.25)
    h.says(pid, wire.Failed(1, "stopped", "Stopping: stopping: memory").encode())
    (failed,) = h.take(JobFailed)
    assert failed.kind == FAIL_MEMORY
    assert "600 MiB passed the 512 MiB max_memory_per_child" in failed.message
    assert "it stopped itself first" in failed.message
    assert h.signals_to(pid) == []  # not killed: it exits on the STOP it was sent


def test_far_over_the_cap_during_its_grace_the_child_is_killed_at_once():
    h = started(size=1, max_memory_per_child=512 * MIB, memory_sample=0.25, kill_grace=10.0)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.os.rss_of[pid] = 600 * MIB
    h.advance(0.25)
    assert h.signals_to(pid) == []
    h.os.rss_of[pid] = 800 * MIB  # past 1.5 times the cap while told
    h.advance(0.25)
    assert h.signals_to(pid) == [signal.SIGKILL]
    h.exits(pid, signalled(signal.SIGKILL))
    (failed,) = h.take(JobFailed)
    assert failed.kind == FAIL_MEMORY and "over 1.5x its limit: killed at once" in failed.message

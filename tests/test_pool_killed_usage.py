"""The usage the parent fills for an attempt it ends itself (issue 26): the policy over
a fake OS and clock. The real processes are in test_run_killed_usage.py."""

from __future__ import annotations

import signal

from pool_fakes import Harness, exited, signalled

from shared import wire
from shared.jobs import ClaimedJob
from shared.procfs import GroupSample
from shared.usage import Usage
from supervisor.pool import JobFailed

MIB = 1 << 20


def job(job_id: int, timeout: float | None = None) -> ClaimedJob:
    return ClaimedJob(job_id, "k", "default", 1, 5, 0, timeout, "{}")


def booted(cpu_at_ready: float, **overrides) -> tuple[Harness, int]:
    h = Harness(size=1, **overrides)
    h.pool.start()
    (pid,) = h.pids()
    h.os.sample_of[pid] = GroupSample(cpu_at_ready, "S", 40 * MIB)
    h.ready()
    h.take()
    return h, pid


def failed(h: Harness, pid: int, status: int) -> JobFailed:
    h.exits(pid, status)
    (out,) = h.take(JobFailed)
    assert out.usage is not None
    return out


def test_a_job_killed_at_its_timeout_counts_the_cpu_since_its_start():
    h, pid = booted(0.5)  # a start hook took 0.5 s of CPU before READY
    h.pool.dispatch(job(1))
    h.advance(0.3)
    h.says(pid, wire.Done(1, b"null", usage=Usage(0.25, 0.3, 50 * MIB)).encode())
    h.take()
    h.pool.dispatch(job(2, timeout=10.0))
    h.advance(9.0)
    # At the kill the group has used 1.0 s more than READY and job 1 account for.
    h.os.sample_of[pid] = GroupSample(0.5 + 0.25 + 1.0, "R", 120 * MIB)
    h.advance(1.0)
    assert h.signals_to(pid)[:1] == [signal.SIGTERM]
    out = failed(h, pid, signalled(signal.SIGTERM))
    assert out.kind == "timeout"
    assert out.usage == Usage(1.0, 10.0, 120 * MIB)


def test_a_job_killed_over_the_memory_cap_keeps_the_rss_that_passed_it():
    h, pid = booted(0.0, max_memory_per_child=100 * MIB)
    h.pool.dispatch(job(1))
    h.os.rss_of[pid] = 150 * MIB
    h.os.sample_of[pid] = GroupSample(0.2, "R", 0)  # the sample at the kill missed it
    h.advance(5.0)
    h.advance(h.pool.settings.kill_grace)  # told first (issue 28), killed at its grace
    assert signal.SIGKILL in h.signals_to(pid)
    out = failed(h, pid, signalled(signal.SIGKILL))
    assert out.kind == "memory"
    assert out.usage.max_rss_bytes == 150 * MIB
    assert out.usage.cpu_seconds == 0.2


def test_a_crashed_child_with_no_sample_in_its_job_records_a_lower_bound():
    h, pid = booted(0.0)
    h.pool.dispatch(job(1))
    h.os.sample_of[pid] = GroupSample(3.0, "R", 80 * MIB)  # never read: no look was due
    h.advance(2.0)
    out = failed(h, pid, exited(1))
    assert out.kind == "crashed"
    assert out.usage == Usage(0.0, 2.0, 0)


def test_a_crashed_child_counts_the_cpu_its_reaping_reports():
    h, pid = booted(0.5)
    h.pool.dispatch(job(1))
    h.advance(1.0)
    h.says(pid, wire.Done(1, b"null", usage=Usage(0.25, 1.0, 50 * MIB)).encode())
    h.pool.dispatch(job(2))
    h.advance(2.0)
    h.os.cpu_at_exit[pid] = 0.5 + 0.25 + 1.5  # wait4: its whole life's CPU
    out = failed(h, pid, signalled(signal.SIGSEGV))
    assert out.kind == "crashed"
    assert out.usage == Usage(1.5, 2.0, 0)


def test_a_child_that_answers_keeps_its_own_usage_and_costs_no_proc_read():
    h, pid = booted(0.0)
    reads = []
    sample = h.os.group_sample
    h.os.group_sample = lambda p: reads.append(p) or sample(p)
    h.pool.dispatch(job(1, timeout=10.0))
    h.advance(0.5)
    mine = Usage(0.4, 0.5, 30 * MIB)
    h.says(pid, wire.Done(1, b"null", usage=mine).encode())
    (done,) = [o for o in h.take() if type(o).__name__ == "JobDone"]
    assert done.usage == mine
    assert reads == []

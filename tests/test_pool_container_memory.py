"""The pool in a container with a memory limit (issue 51), against the fake OS and
clock: a child the kernel's OOM killer took is told as ``memory`` with the RSS last
sampled; the container guard stops the youngest job before the kernel does; the RSS a
job's answer carries is its process tree's when the parent saw more."""

from __future__ import annotations

import signal

import pool_handlers  # noqa: F401  (registers the pool_* kinds the parent looks up)
import pytest
from pool_fakes import Harness, signalled

from shared import wire
from shared.jobs import FAIL_CRASHED, FAIL_MEMORY, ClaimedJob
from shared.usage import Usage
from supervisor.pool import JobDone, JobFailed

pytestmark = pytest.mark.timeout(10)
MIB = 1 << 20
GIB = 1 << 30


def job(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", "default", 1, 5, 0, None, "{}")


def in_container(size: int = 2, limit: int | None = GIB, oom_kills: int | None = 0,
                 **overrides) -> Harness:
    """A started pool whose OS says it runs under a ``limit`` memory cgroup."""
    h = Harness(size=size, memory_sample=0.25, watch_memory=True, **overrides)
    h.os.memory_limit_now = limit
    h.os.oom_kills_now = oom_kills
    h.os.memory_usage_now = 200 * MIB
    h.pool.start()
    h.ready()
    h.take()
    return h


def test_a_sigkill_the_parent_did_not_send_while_the_oom_count_moved_is_memory():
    h = in_container(size=1)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.os.rss_of[pid] = 300 * MIB
    h.advance(0.25)  # sampled: 300 MiB
    h.os.oom_kills_now = 1
    h.exits(pid, signalled(signal.SIGKILL))
    (failed,) = h.take(JobFailed)
    assert failed.kind == FAIL_MEMORY and not failed.terminal
    assert "OOM killer" in failed.message and "300 MiB" in failed.message
    assert failed.usage is not None and failed.usage.max_rss_bytes == 300 * MIB


def test_a_sigkill_without_an_oom_kill_counted_stays_a_crash():
    h = in_container(size=1)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.exits(pid, signalled(signal.SIGKILL))  # kill -9 from outside: the count did not move
    (failed,) = h.take(JobFailed)
    assert failed.kind == FAIL_CRASHED


def test_one_oom_kill_explains_one_death_only():
    h = in_container(size=2)
    first, second = h.pids()
    h.pool.dispatch(job(1))
    h.pool.dispatch(job(2))
    h.os.oom_kills_now = 1
    h.exits(first, signalled(signal.SIGKILL))
    h.exits(second, signalled(signal.SIGKILL))
    kinds = {f.job.id: f.kind for f in h.take(JobFailed)}
    assert kinds == {1: FAIL_MEMORY, 2: FAIL_CRASHED}


def test_outside_a_container_a_sigkill_is_a_crash():
    h = in_container(size=1, limit=None, oom_kills=None)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.exits(pid, signalled(signal.SIGKILL))
    (failed,) = h.take(JobFailed)
    assert failed.kind == FAIL_CRASHED


def test_near_the_limit_the_youngest_job_is_told_then_killed_at_once():
    h = in_container(size=2, limit=GIB)  # headroom 64 MiB: notice at 960, kill at 992
    older, younger = h.pids()
    h.pool.dispatch(job(1))
    h.advance(1.0)
    h.pool.dispatch(job(2))
    h.os.rss_of[older], h.os.rss_of[younger] = 500 * MIB, 400 * MIB
    h.os.memory_usage_now = 970 * MIB
    h.advance(0.25)
    stopping = [f for f in h.sent(younger) if f.type == wire.STOPPING]
    assert len(stopping) == 1 and h.signals_to(younger) == []
    assert not [f for f in h.sent(older) if f.type == wire.STOPPING]
    h.advance(0.25)  # still short of the kill line: its notice stands
    assert h.signals_to(younger) == [] and h.signals_to(older) == []
    h.os.memory_usage_now = 1000 * MIB
    h.advance(0.25)
    assert h.signals_to(younger) == [signal.SIGKILL] and h.signals_to(older) == []
    h.os.memory_usage_now = 1010 * MIB  # not freed yet: nothing more is killed meanwhile
    h.advance(0.25)
    assert h.signals_to(older) == []
    h.exits(younger, signalled(signal.SIGKILL))
    (failed,) = h.take(JobFailed)
    assert failed.job.id == 2 and failed.kind == FAIL_MEMORY
    assert "container's memory" in failed.message
    assert failed.usage is not None and failed.usage.max_rss_bytes == 400 * MIB


def test_a_job_over_its_cap_is_killed_at_once_when_the_container_nears_its_limit():
    h = in_container(size=2, limit=GIB, max_memory_per_child=450 * MIB)
    first, second = h.pids()
    h.pool.dispatch(job(1))
    h.advance(0.1)
    h.pool.dispatch(job(2))
    h.os.rss_of[first] = h.os.rss_of[second] = 460 * MIB  # both over: both told
    h.advance(0.25)
    assert h.signals_to(first) == [] and h.signals_to(second) == []
    h.os.memory_usage_now = 965 * MIB  # past the notice line, before the kill line
    h.os.rss_of[first] = h.os.rss_of[second] = 480 * MIB
    h.advance(0.25)
    killed = [pid for pid in (first, second) if h.signals_to(pid) == [signal.SIGKILL]]
    assert killed == [second]  # the youngest of those told, not after kill_grace


def test_far_from_the_limit_nothing_is_stopped():
    h = in_container(size=1, limit=GIB)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.os.memory_usage_now = 900 * MIB
    h.advance(0.25)
    assert not [f for f in h.sent(pid) if f.type == wire.STOPPING]


def test_an_answer_carries_the_trees_peak_the_parent_sampled():
    h = in_container(size=1)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.os.rss_of[pid] = 650 * MIB  # the child and the subprocess it runs
    h.advance(0.25)
    h.says(pid, wire.Done(1, b"null", usage=Usage(0.1, 3.0, 40 * MIB)).encode())
    (done,) = h.take(JobDone)
    assert done.usage is not None and done.usage.max_rss_bytes == 650 * MIB

"""The pool's parts below the policy: its settings, the record the parent keeps per
child, how a child is forked, and the crash-loop counter.

``supervisor.pool.pool.Pool`` decides what happens to children; this module knows how one
comes to exist and what the parent remembers about it.
"""

from __future__ import annotations

import os
import random
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from shared import wire
from shared.exitcodes import CHILD_BOOT_ERROR
from shared.jobs import ClaimedJob
from supervisor.pool.oscalls import OsCalls
from workers.child import ChildConfig

# Child states, as the parent sees them.
BOOTING = "booting"  # forked, READY not seen yet
IDLE = "idle"  # ready for a job
BUSY = "busy"  # one job in flight
STOPPING = "stopping"  # told STOP, or its last answer said so: expected to exit
KILLED = "killed"  # signalled by the parent: waiting to reap it
DEAD = "dead"  # reaped; the record is being wound up

ACTIVE_STATES = frozenset({BOOTING, IDLE, BUSY})  # count toward the pool's size


@dataclass
class PoolSettings:
    """How the pool runs its children. Times are seconds, sizes bytes."""

    size: int
    boot_timeout: float = 30.0  # READY within this or SIGKILL
    heartbeat_interval: float = 2.0  # the child beats this often while a job runs
    heartbeat_timeout: float = 30.0  # silence beyond this while busy = hung: kill group
    kill_grace: float = 5.0  # SIGTERM to the group, then SIGKILL after this
    max_jobs_per_child: int | None = None
    max_jobs_jitter: float = 0.1  # each child's limit drawn in [n*(1-j), n*(1+j)]
    max_memory_per_child: int | None = None  # RSS, checked by the child between jobs
    max_result_bytes: int = 1 << 20
    max_frame_bytes: int = 64 << 20
    crash_loop_limit: int = 5  # boot failures in a row, or within the window, halt
    crash_loop_window: float = 60.0
    child_imports: tuple[str, ...] = ()  # modules each child imports after boot

    def draw_max_jobs(self, rng: random.Random) -> int | None:
        """One child's job limit, jittered so that children do not all recycle in the
        same moment."""
        n = self.max_jobs_per_child
        if n is None:
            return None
        j = max(0.0, min(self.max_jobs_jitter, 1.0))
        return max(1, round(rng.uniform(n * (1 - j), n * (1 + j))))


@dataclass(eq=False, slots=True)
class Child:
    """What the parent knows about one child, from fork until it is reaped."""

    pid: int
    worker_no: int
    read_fd: int  # the child's frames arrive here (non-blocking)
    write_fd: int  # RUN and STOP go out here (non-blocking)
    max_jobs: int | None
    spawned_at: float
    boot_deadline: float | None
    reader: wire.FrameReader
    writer: wire.FrameWriter = field(default_factory=wire.FrameWriter)
    write: Callable[[bytes], int] | None = None  # bound write to write_fd
    state: str = BOOTING
    ready: bool = False
    job: ClaimedJob | None = None
    job_started: float = 0.0
    timeout: float | None = None
    job_deadline: float | None = None
    beat_deadline: float | None = None
    exit_deadline: float | None = None  # STOP or SIGTERM sent: SIGKILL the group then
    retire_after_job: bool = False
    expected_exit: bool = False  # the parent asked it to go: not a boot failure
    sigkilled: bool = False
    kill_kind: str | None = None  # failure kind for the job if the kill ends it
    kill_message: str | None = None
    boot_error: str | None = None  # what the child said before dying at boot
    read_open: bool = True
    write_registered: bool = False
    jobs_done: int = 0

    def deadline(self) -> float | None:
        """The earliest moment the parent must look at this child again."""
        state = self.state
        if state == BUSY:
            beat = self.beat_deadline
            job = self.job_deadline
            if job is None or (beat is not None and beat < job):
                return beat
            return job
        if state == BOOTING:
            return self.boot_deadline
        return self.exit_deadline

    def describe(self) -> str:
        """``worker 3 (pid 1234)``, for messages."""
        return f"worker {self.worker_no} (pid {self.pid})"


def spawn_child(oscalls: OsCalls, settings: PoolSettings, *, worker_no: int,
                max_jobs: int | None, parent_pid: int, now: float,
                entry: Callable[[ChildConfig], object]) -> Child:
    """Fork one child with fresh pipes and return its record. In the child, ``entry``
    runs and the process leaves by ``os._exit``; this function never returns there."""
    down_r, down_w = oscalls.pipe()  # parent -> child
    try:
        up_r, up_w = oscalls.pipe()  # child -> parent
    except OSError:
        oscalls.close(down_r)
        oscalls.close(down_w)
        raise
    config = ChildConfig(
        worker_no=worker_no,
        parent_pid=parent_pid,
        read_fd=down_r,
        write_fd=up_w,
        heartbeat_interval=settings.heartbeat_interval,
        max_jobs=max_jobs,
        max_memory=settings.max_memory_per_child,
        max_result_bytes=settings.max_result_bytes,
        max_frame_bytes=settings.max_frame_bytes,
        imports=tuple(settings.child_imports),
    )
    # Anything buffered now would be written twice: once by us, once by the child.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        pid = oscalls.fork()
    except OSError:
        for fd in (down_r, down_w, up_r, up_w):
            oscalls.close(fd)
        raise
    if pid == 0:
        try:
            entry(config)
        finally:
            os._exit(CHILD_BOOT_ERROR)
    oscalls.close(down_r)
    oscalls.close(up_w)
    # The child calls setpgrp itself; doing it here too closes the window in which the
    # parent might signal a group that does not exist yet.
    oscalls.setpgid(pid, pid)
    oscalls.set_blocking(up_r, False)
    oscalls.set_blocking(down_w, False)
    return Child(
        pid=pid,
        worker_no=worker_no,
        read_fd=up_r,
        write_fd=down_w,
        max_jobs=max_jobs,
        spawned_at=now,
        boot_deadline=now + settings.boot_timeout,
        reader=wire.FrameReader(settings.max_frame_bytes),
        write=partial(oscalls.write, down_w),
    )


class CrashLoop:
    """Counts children that died before READY. The pool halts when ``limit`` of them
    die in a row (a READY in between resets the streak) or within ``window`` seconds
    (a READY does not forgive those: children that alternate between booting and dying
    are a loop too)."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self.streak = 0
        self._times: deque[float] = deque()
        self.last_failure = ""

    def ready(self) -> None:
        """A child booted: the streak is over."""
        self.streak = 0

    def failed(self, now: float, description: str) -> bool:
        """Record a boot failure; True if the pool must halt."""
        self.streak += 1
        self.last_failure = description
        times = self._times
        times.append(now)
        while times and times[0] < now - self.window:
            times.popleft()
        return self.streak >= self.limit or len(times) >= self.limit

    def message(self) -> str:
        """Why the pool halted, in one line."""
        return (f"crash loop: {self.streak if self.streak >= self.limit else len(self._times)}"
                f" children died before they were ready; the last: {self.last_failure}")

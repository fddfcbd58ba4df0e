"""How one child comes to exist, and the counter that stops a pool whose children keep
dying before they are ready.

``spawn_child`` makes the pipes, forks, and wraps the parent's two ends in a
``ChildProcess``; whether to fork at all is the policy in ``supervisor.pool.pool``.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import sys
from collections import deque
from collections.abc import Callable

from shared.exitcodes import CHILD_BOOT_ERROR, CHILD_BOOT_FAILURES
from supervisor.pool.oscalls import OsCalls
from supervisor.pool.process import ChildProcess
from supervisor.pool.settings import PoolSettings
from workers.child import ChildConfig


def spawn_child(oscalls: OsCalls, settings: PoolSettings, selector: selectors.BaseSelector,
                tag: object, log: logging.Logger, *, worker_no: int, max_jobs: int | None,
                parent_pid: int, now: float,
                entry: Callable[[ChildConfig], object]) -> ChildProcess:
    """Fork one child and return it, its read end watched by ``selector`` with ``tag``
    as the key's data."""
    pid, read_fd, write_fd = fork_child(oscalls, settings, worker_no=worker_no,
                                        max_jobs=max_jobs, parent_pid=parent_pid,
                                        entry=entry)
    return ChildProcess(pid, worker_no, read_fd, write_fd, max_jobs=max_jobs, now=now,
                        settings=settings, oscalls=oscalls, selector=selector, tag=tag,
                        log=log)


def fork_child(oscalls: OsCalls, settings: PoolSettings, *, worker_no: int,
               max_jobs: int | None, parent_pid: int,
               entry: Callable[[ChildConfig], object]) -> tuple[int, int, int]:
    """Fork one child with fresh pipes; return (pid, read fd, write fd) of the parent's
    ends, both non-blocking. In the child, ``entry`` runs and the process leaves by
    ``os._exit``; this function never returns there."""
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
        default_soft_timeout=settings.default_soft_timeout,
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
    return pid, up_r, down_w


class RespawnBackoff:
    """Spacing between forks after children die before READY for a reason that is not
    their code's (killed from outside while booting): 0.1 s doubling to a cap, back to
    nothing once a child is ready. Such deaths never halt the pool."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first = first
        self.cap = cap
        self.delay = 0.0
        self.due: float | None = None  # no fork before this

    def died(self, now: float) -> None:
        """A child died while booting: wait longer before the next fork."""
        self.delay = self.first if self.delay == 0.0 else min(self.delay * 2, self.cap)
        self.due = now + self.delay

    def ready(self) -> None:
        """A child booted: fork freely again."""
        self.delay = 0.0
        self.due = None

    def waiting(self, now: float) -> bool:
        """True while forks must wait."""
        if self.due is not None and now >= self.due:
            self.due = None
        return self.due is not None


def boot_failure_of_code(status: int, said_boot_error: bool, killed_at_boot: bool) -> bool:
    """Whether a child that died before READY shows that the code cannot start: it said
    BOOT_ERROR, exited with a boot-failure code, crashed on a fault of its own (SIGSEGV
    in an extension's import, say), or the parent killed it for not being ready in time.
    A death by an outside signal (SIGKILL, SIGTERM, the OOM killer) is not the code's."""
    if said_boot_error or killed_at_boot:
        return True
    if os.WIFSIGNALED(status):
        return os.WTERMSIG(status) in _FAULTS
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) in CHILD_BOOT_FAILURES


_FAULTS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE,
                     signal.SIGABRT, signal.SIGSYS})


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

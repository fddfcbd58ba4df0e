"""The pool's children coming and going: reaping the ones that exited (their running job
fails, their queued jobs come back unstarted) and forking or retiring children to keep
the target size. A base of ``Pool``, kept apart so the policy module holds the jobs'
path and deadlines; the state is ``Pool``'s."""

from __future__ import annotations

import logging
import os
import random
import selectors
from collections import deque
from collections.abc import Callable

from shared.exitcodes import CHILD_RECYCLE, describe_child_exit
from supervisor.pool.oscalls import OsCalls
from supervisor.pool.process import ChildProcess
from supervisor.pool.settings import PoolSettings
from supervisor.pool.spawn import CrashLoop, RespawnBackoff, boot_failure_of_code, spawn_child
from supervisor.pool.states import ACTIVE_STATES, BOOTING, BUSY, IDLE


class PoolLife:
    """Reaping and sizing for ``Pool``."""

    settings: PoolSettings
    _children: dict[int, ChildProcess]
    _by_fd: dict[int, ChildProcess]
    _idle: deque[ChildProcess]
    _in_flight: dict[int, ChildProcess]
    _pushing: set[ChildProcess]
    _outcomes: list
    _os: OsCalls
    _sel: selectors.BaseSelector
    _rng: random.Random
    _entry: Callable[..., object]
    _clock: Callable[[], float]
    _log: logging.Logger
    _crashes: CrashLoop
    _respawn: RespawnBackoff
    _target: int
    _stopping: bool
    _halted: str | None
    _started: bool
    _parent_pid: int
    _size_dirty: bool

    # -- reaping ---------------------------------------------------------------

    def reap(self) -> None:
        """Collect every exited child (and any other process we inherited), report
        their jobs, and fork replacements."""
        while True:
            pid, status = self._os.waitpid_any()
            if pid <= 0:
                break
            child = self._children.pop(pid, None)
            if child is None:
                self._log.debug("reaped pid %d (not one of ours): %s", pid,
                                describe_child_exit(status))
                continue
            self._on_exit(child, status)
        if self._size_dirty:
            self._maintain_size()

    def _on_exit(self, child: ChildProcess, status: int) -> None:
        now = self._clock()
        self._size_dirty = True
        if child.state == IDLE:
            self._idle.remove(child)
        held = list(child.jobs)
        self._pushing.discard(child)
        how = f"child {child.pid} {describe_child_exit(status)}"
        child.close(now, self._outcomes, how)
        for job in held:
            if self._in_flight.get(job.id) is child:
                del self._in_flight[job.id]
        for fd in (child.read_fd, child.write_fd):
            if self._by_fd.get(fd) is child:
                del self._by_fd[fd]
        if not child.ready and not child.expected_exit:
            detail = f"{child.describe()} {describe_child_exit(status)}"
            if child.boot_error:
                detail += f": {child.boot_error}"
            self._event(child, "boot_failed", detail)
            self._log.error("%s died before it was ready", detail)
            if not boot_failure_of_code(status, bool(child.boot_error), child.sigkilled):
                self._respawn.died(now)  # not the code's fault: fork again, spaced out
                self._arm(self._respawn.due)
            elif self._crashes.failed(now, detail) and not self._halted:
                self._halted = self._crashes.message()
                self._log.critical("%s; no more children will be forked", self._halted)
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == CHILD_RECYCLE:
            self._event(child, "recycled", how)
        else:
            self._event(child, "exited", how)

    # -- size ------------------------------------------------------------------

    def _maintain_size(self) -> None:
        self._size_dirty = False
        if not self._started or self._stopping or self._halted:
            return
        active = [c for c in self._children.values() if c.state in ACTIVE_STATES]
        missing = self._target - len(active)
        if missing > 0 and self._respawn.waiting(self._clock()):
            self._size_dirty = True  # tick forks them once the backoff is over
            self._arm(self._respawn.due)
            missing = 0
        for _ in range(missing):
            if not self._spawn():
                self._size_dirty = True  # try again at the next tick
                break
        staying = [c for c in active if not c.retire_after_job]
        excess = len(staying) - self._target
        if excess > 0:
            self._shrink(staying, excess)

    def _shrink(self, staying: list[ChildProcess], excess: int) -> None:
        now = self._clock()
        order = {IDLE: 0, BOOTING: 1, BUSY: 2}
        for child in sorted(staying, key=lambda c: order[c.state])[:excess]:
            if child.state == BUSY:
                self._retire(child, now, "pool shrinking")
            else:
                self._stop(child, now, "pool shrinking")

    def _spawn(self) -> bool:
        taken = {c.worker_no for c in self._children.values() if c.state in ACTIVE_STATES}
        worker_no = 1
        while worker_no in taken:
            worker_no += 1
        max_jobs = self.settings.draw_max_jobs(self._rng)
        try:
            child = spawn_child(self._os, self.settings, self._sel, self, self._log,
                                worker_no=worker_no, max_jobs=max_jobs,
                                parent_pid=self._parent_pid, now=self._clock(),
                                entry=self._entry)
        except OSError as exc:
            self._log.error("could not fork worker %d: %s", worker_no, exc)
            return False
        self._children[child.pid] = child
        self._by_fd[child.read_fd] = self._by_fd[child.write_fd] = child
        self._arm(child.boot_deadline)
        self._event(child, "spawned", f"max_jobs={max_jobs}")
        return True


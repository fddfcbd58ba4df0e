"""The pool of pre-forked children, driven by the parent's own selector loop.

The pool is event-driven and never blocks: the parent loop feeds it readable and
writable fds (``handle_event``), SIGCHLD (``reap``) and the passage of time (``tick`` at
``next_deadline()``), hands it jobs (``dispatch``) and collects what happened
(``take_outcomes``). It owns every child's pipes, deadlines and fate; it knows nothing
of the database. One job is in flight per child and goes only to an idle child.

Every OS call goes through ``supervisor.pool.oscalls.OsCalls`` and time comes from an
injected monotonic clock, so the policy here is tested with fakes.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import selectors
import signal
from collections.abc import Callable

from shared import wire
from shared.exitcodes import CHILD_RECYCLE, describe_child_exit
from shared.jobs import (
    FAIL_CANCELLED,
    FAIL_CRASHED,
    FAIL_HUNG,
    FAIL_SHUTDOWN,
    FAIL_TIMEOUT,
    ClaimedJob,
)
from supervisor.pool.childproc import (
    ACTIVE_STATES,
    BOOTING,
    BUSY,
    DEAD,
    IDLE,
    KILLED,
    Child,
    PoolSettings,
    spawn_child,
)
from supervisor.pool.oscalls import OsCalls, monotonic
from supervisor.pool.outcomes import JobFailed, PoolHalted
from supervisor.pool.poolio import EVENT_READ, PoolIO
from workers.child import child_main

_encode_run = wire.encode_run


class Pool(PoolIO):
    """N forked children running handlers, one job each at a time."""

    def __init__(self, settings: PoolSettings, selector: selectors.BaseSelector, *,
                 oscalls: OsCalls | None = None, clock: Callable[[], float] | None = None,
                 log: logging.Logger | None = None, rng: random.Random | None = None,
                 entry: Callable[..., object] = child_main) -> None:
        super().__init__(settings, selector, oscalls or OsCalls(), clock or monotonic,
                         log or logging.getLogger("supervisor.pool"))
        self._rng = rng or random.Random()
        self._entry = entry  # what a forked child runs (tests may substitute)
        self._target = settings.size
        self._halted: str | None = None
        self._halt_raised = False
        self._started = False
        self._parent_pid = 0

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Fork the children. Call from the main thread once the handler modules are
        imported: ``gc.freeze()`` first keeps the shared heap's pages shared."""
        if self._started:
            return
        self._started = True
        self._parent_pid = self._os.getpid()
        gc.freeze()
        self._maintain_size()

    def stop(self) -> None:
        """Graceful: STOP to idle children now, to busy ones after their job; no
        replacements from now on."""
        self._stopping = True
        now = self._clock()
        for child in list(self._children.values()):
            if child.state in (IDLE, BOOTING):
                self._send_stop(child, now, "pool stopping")
            elif child.state == BUSY:
                child.retire_after_job = True

    def kill_all(self) -> None:
        """SIGKILL every child's group; no replacements. Jobs still in flight are
        reported as ``shutdown`` when their children are reaped."""
        self._stopping = True
        now = self._clock()
        for child in list(self._children.values()):
            self._kill(child, now, FAIL_SHUTDOWN, "killed at shutdown", signal.SIGKILL)

    def interrupt_all(self, kind: str = FAIL_SHUTDOWN) -> None:
        """Kill every busy child's group now; each job is reported as
        ``JobFailed(kind)`` once its child is reaped (unless it answered first)."""
        now = self._clock()
        for child in list(self._in_flight.values()):
            self._kill(child, now, kind, f"interrupted ({kind}) while running",
                       signal.SIGKILL)

    def recycle_all(self) -> None:
        """Replace every child with a fresh fork: idle ones now, busy ones after their
        job (SIGHUP)."""
        now = self._clock()
        for child in list(self._children.values()):
            if child.state == IDLE:
                self._send_stop(child, now, "recycling all")
            elif child.state in (BUSY, BOOTING):
                # Forked before the reload: it must not serve, even once booted.
                child.retire_after_job = True
        self._maintain_size()

    def resize(self, n: int) -> None:
        """Change the target size (TTIN/TTOU): grow now; shrink by retiring idle
        children first, then booting ones, then busy ones after their job."""
        self._target = max(0, n)
        self._maintain_size()

    # -- what the parent loop asks ---------------------------------------------

    @property
    def halted(self) -> str | None:
        """Why the pool stopped forking (a crash loop), or None."""
        return self._halted

    def size(self) -> int:
        """The current target number of children."""
        return self._target

    def alive(self) -> int:
        """Children not reaped yet (the parent's drain waits for 0)."""
        return len(self._children)

    def idle_count(self) -> int:
        """Children ready for a job now."""
        return len(self._idle)

    def busy_count(self) -> int:
        """Jobs in flight."""
        return len(self._in_flight)

    def running(self) -> list[ClaimedJob]:
        """The jobs in flight now (for lease renewal and drain)."""
        return [child.job for child in self._in_flight.values() if child.job is not None]

    def take_outcomes(self) -> list:
        """Every JobDone, JobFailed, JobProgress and ChildEvent since the last call."""
        outcomes = self._outcomes
        if outcomes:
            self._outcomes = []
        return outcomes

    def next_deadline(self) -> float | None:
        """Monotonic time by which ``tick`` must run: the next boot, heartbeat, job or
        kill deadline (possibly a little early, never late)."""
        return self._due

    def _earliest(self) -> float | None:
        soonest = None
        for child in self._children.values():
            due = child.deadline()
            if due is not None and (soonest is None or due < soonest):
                soonest = due
        return soonest

    # -- jobs ------------------------------------------------------------------

    def dispatch(self, job: ClaimedJob) -> bool:
        """Send ``job`` to an idle child and arm its timeout (``job.timeout``, already
        resolved; None or 0: none) and heartbeat deadline. False if no child is idle."""
        if not self._idle:
            return False
        child = self._idle.popleft()
        now = self._clock()
        timeout = job.timeout  # resolved by the caller: row, handler, config
        child.state = BUSY
        child.job = job
        child.job_started = now
        child.timeout = timeout
        child.job_deadline = now + timeout if timeout else None
        child.beat_deadline = beat = now + self.settings.heartbeat_timeout
        due = self._due
        if due is None or beat < due:
            self._due = beat
        if child.job_deadline is not None and child.job_deadline < self._due:
            self._due = child.job_deadline
        self._in_flight[job.id] = child
        self._send(child, _encode_run(job.id, job.kind, job.queue, job.attempt,
                                      job.max_attempts, job.args_json))
        return True

    def cancel(self, job_id: int) -> bool:
        """Kill the child running ``job_id`` (SIGTERM, grace, SIGKILL); the job is
        reported as ``cancelled``. False if that job is not running here."""
        child = self._in_flight.get(job_id)
        if child is None or child.state != BUSY:
            return False
        self._kill(child, self._clock(), FAIL_CANCELLED, "cancelled while running")
        return True

    # -- deadlines and kills ---------------------------------------------------

    def tick(self) -> None:
        """Enforce every deadline that has passed and fork replacements. Raises
        ``PoolHalted`` once, at the first tick after children crash-looped at boot;
        later ticks keep enforcing deadlines (kills still escalate) and fork nothing."""
        due = self._due
        if due is not None:
            now = self._clock()
            if now >= due:
                self._enforce_deadlines(now)
                self._due = self._earliest()
        if self._size_dirty:
            self._maintain_size()
        if self._halted and not self._halt_raised:
            self._halt_raised = True
            raise PoolHalted(self._halted)

    def _enforce_deadlines(self, now: float) -> None:
        settings = self.settings
        for child in list(self._children.values()):
            state = child.state
            if state == BUSY:
                if child.job_deadline is not None and now >= child.job_deadline:
                    self._kill(child, now, FAIL_TIMEOUT,
                               f"ran past its {child.timeout} s timeout")
                elif child.beat_deadline is not None and now >= child.beat_deadline:
                    self._kill(child, now, FAIL_HUNG,
                               f"no heartbeat for {settings.heartbeat_timeout} s")
            elif state == BOOTING:
                if child.boot_deadline is not None and now >= child.boot_deadline:
                    self._kill(child, now, None,
                               f"not ready within {settings.boot_timeout} s",
                               signal.SIGKILL, boot=True)
            elif child.exit_deadline is not None and now >= child.exit_deadline:
                self._log.warning("%s did not exit in time: SIGKILL to its group",
                                  child.describe())
                self._os.killpg(child.pid, signal.SIGKILL)
                child.sigkilled = True
                child.exit_deadline = None

    def _kill(self, child: Child, now: float, kind: str | None, message: str,
              sig: int = signal.SIGTERM, *, boot: bool = False) -> None:
        """Signal the child's whole group; with SIGTERM, SIGKILL follows after the
        grace. ``kind`` is what the job in flight, if any, failed of."""
        if child.state == DEAD or (child.state == KILLED and
                                   (child.sigkilled or sig != signal.SIGKILL)):
            return
        if child.state == IDLE:
            self._idle.remove(child)
        if child.job is not None and kind is not None and child.kill_kind is None:
            child.kill_kind = kind
            child.kill_message = message
        child.expected_exit = child.expected_exit or not boot
        child.state = KILLED
        self._os.killpg(child.pid, sig)
        if sig == signal.SIGKILL:
            child.sigkilled = True
            child.exit_deadline = None
        else:
            # A stopped process holds SIGTERM pending until it runs again.
            self._os.killpg(child.pid, signal.SIGCONT)
            child.exit_deadline = now + self.settings.kill_grace
            self._arm(child.exit_deadline)
        self._size_dirty = True
        self._event(child, "killed", message)

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

    def _on_exit(self, child: Child, status: int) -> None:
        now = self._clock()
        self._size_dirty = True
        if child.state == IDLE:
            self._idle.remove(child)
        child.state = DEAD
        # A DONE written just before death still counts: read it before judging.
        while child.read_open and self._read(child):
            pass
        self._close_read(child)
        if child.write_registered:
            self._sel.unregister(child.write_fd)
            child.write_registered = False
        self._by_fd.pop(child.write_fd, None)
        self._os.close(child.write_fd)
        child.writer.clear()
        # Whatever the handler left running in the group goes with the child.
        self._os.killpg(child.pid, signal.SIGKILL)
        how = f"child {child.pid} {describe_child_exit(status)}"
        job = child.job
        if job is not None:
            self._in_flight.pop(job.id, None)
            child.job = None
            kind = child.kill_kind or FAIL_CRASHED
            message = child.kill_message or how
            self._outcomes.append(JobFailed(job, kind, message, None, None, False,
                                            now - child.job_started))
        if not child.ready and not child.expected_exit:
            detail = f"{child.describe()} {describe_child_exit(status)}"
            if child.boot_error:
                detail += f": {child.boot_error}"
            self._event(child, "boot_failed", detail)
            self._log.error("%s died before it was ready", detail)
            if self._crashes.failed(now, detail) and not self._halted:
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
        for _ in range(self._target - len(active)):
            if not self._spawn():
                self._size_dirty = True  # try again at the next tick
                break
        staying = [c for c in active if not c.retire_after_job]
        excess = len(staying) - self._target
        if excess > 0:
            self._shrink(staying, excess)

    def _shrink(self, staying: list[Child], excess: int) -> None:
        now = self._clock()
        order = {IDLE: 0, BOOTING: 1, BUSY: 2}
        for child in sorted(staying, key=lambda c: order[c.state])[:excess]:
            if child.state == BUSY:
                child.retire_after_job = True
            else:
                self._send_stop(child, now, "pool shrinking")

    def _spawn(self) -> bool:
        taken = {c.worker_no for c in self._children.values() if c.state in ACTIVE_STATES}
        worker_no = 1
        while worker_no in taken:
            worker_no += 1
        try:
            child = spawn_child(self._os, self.settings, worker_no=worker_no,
                                max_jobs=self.settings.draw_max_jobs(self._rng),
                                parent_pid=self._parent_pid, now=self._clock(),
                                entry=self._entry)
        except OSError as exc:
            self._log.error("could not fork worker %d: %s", worker_no, exc)
            return False
        self._children[child.pid] = child
        self._by_fd[child.read_fd] = child
        self._by_fd[child.write_fd] = child
        self._sel.register(child.read_fd, EVENT_READ, self)
        self._arm(child.boot_deadline)
        self._event(child, "spawned", f"max_jobs={child.max_jobs}")
        return True

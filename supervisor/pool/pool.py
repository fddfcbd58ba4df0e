"""The pool of pre-forked children, driven by the parent's own selector loop.

The pool is event-driven and never blocks: the parent loop feeds it readable and
writable fds (``handle_event``), SIGCHLD (``reap``) and the passage of time (``tick`` at
``next_deadline()``), hands it jobs (``dispatch``) and collects what happened
(``take_outcomes``). It is only policy: which child gets a job, when one is stopped,
killed, replaced or retired, when forking must stop. Each child's pipes, frames and
deadlines are its ``ChildProcess``'s. Each child holds a small queue of jobs in its
pipe (``dispatch(job, depth)``: an idle child first, else the least loaded child with
room), so it never waits for the parent between two jobs; jobs queued in a child that
dies, is recycled or told to stop come back unstarted (``JobReturned``). Every OS call
goes through ``OsCalls`` and time comes from an injected monotonic clock, so the policy
is tested with fakes; nothing here touches the database.
"""

from __future__ import annotations

import gc
import logging
import random
import selectors
import signal
from collections import deque
from collections.abc import Callable

from shared import jobs
from supervisor.pool import guards, states
from supervisor.pool.life import PoolLife
from supervisor.pool.oscalls import OsCalls, monotonic
from supervisor.pool.outcomes import (
    ChildEvent,
    JobDone,
    JobFailed,
    JobReturned,
    JobStarted,
    PoolHalted,
)
from supervisor.pool.process import ChildProcess
from supervisor.pool.queries import PoolQueries
from supervisor.pool.settings import PoolSettings
from supervisor.pool.spawn import CrashLoop, RespawnBackoff
from supervisor.pool.states import BOOTING, BUSY, IDLE
from workers.child import child_main

_ENDS = (JobDone, JobFailed)  # outcomes that end a job in flight


class Pool(PoolQueries, PoolLife):
    """N forked children running handlers, each with a small queue of jobs."""

    def __init__(self, settings: PoolSettings, selector: selectors.BaseSelector, *,
                 oscalls: OsCalls | None = None, clock: Callable[[], float] | None = None,
                 log: logging.Logger | None = None, rng: random.Random | None = None,
                 entry: Callable[..., object] = child_main) -> None:
        self.settings = settings
        self._sel = selector
        self._os = oscalls or OsCalls()
        self._clock = clock or monotonic
        self._log = log or logging.getLogger("supervisor.pool")
        self._rng = rng or random.Random()
        self._entry = entry  # what a forked child runs (tests may substitute)
        self._children: dict[int, ChildProcess] = {}  # by pid, until reaped
        self._by_fd: dict[int, ChildProcess] = {}
        self._idle: deque[ChildProcess] = deque()
        self._in_flight: dict[int, ChildProcess] = {}  # job id -> child, until answered
        self._pushing: set[ChildProcess] = set()  # busy children with RUN frames to write
        self._outcomes: list = []
        self._crashes = CrashLoop(settings.crash_loop_limit, settings.crash_loop_window)
        self._respawn = RespawnBackoff()
        self._target = settings.size
        self._stopping = False
        self._halted: str | None = None
        self._halt_raised = False
        self._started = False
        self._parent_pid = 0
        # A lower bound on the earliest deadline of any child: extending a deadline
        # leaves it early, which costs one idle look, never a missed deadline.
        self._due: float | None = None
        self._size_dirty = True  # a child left the active states: recount in tick
        self._nap = guards.nap_threshold(settings)

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
        """Graceful: STOP to every child now; a busy one finishes its running job and
        starts none of its queued ones (they come back when it exits); no replacements
        from now on."""
        self._stopping = True
        now = self._clock()
        for child in list(self._children.values()):
            if child.state in (IDLE, BOOTING):
                self._stop(child, now, "pool stopping")
            elif child.state == BUSY:
                self._retire(child, now, "pool stopping")

    def kill_all(self) -> None:
        """SIGKILL every child's group; no replacements. Jobs still in flight are
        reported as ``shutdown`` (queued ones as returned) when their children are
        reaped."""
        self._stopping = True
        now = self._clock()
        for child in list(self._children.values()):
            self._kill(child, now, jobs.FAIL_SHUTDOWN, "killed at shutdown", signal.SIGKILL)

    def interrupt_all(self, kind: str = jobs.FAIL_SHUTDOWN) -> None:
        """Kill every busy child's group now; each running job is reported as
        ``JobFailed(kind)`` once its child is reaped (unless it answered first), each
        queued one as returned."""
        now = self._clock()
        for child in {id(c): c for c in self._in_flight.values()}.values():
            self._kill(child, now, kind, f"interrupted ({kind}) while running",
                       signal.SIGKILL)

    def recycle_all(self) -> None:
        """Replace every child with a fresh fork: idle ones now, busy ones after their
        running job (SIGHUP); what they hold queued goes to the new ones."""
        now = self._clock()
        for child in list(self._children.values()):
            if child.state == IDLE:
                self._stop(child, now, "recycling all")
            elif child.state == BUSY:
                self._retire(child, now, "recycling all")
            elif child.state == BOOTING:
                # Forked before the reload: it must not serve, even once booted.
                child.retire_after_job = True
        self._maintain_size()

    def resize(self, n: int) -> None:
        """Change the target size (TTIN/TTOU): grow now; shrink by retiring idle
        children first, then booting ones, then busy ones after their job."""
        self._target = max(0, n)
        self._maintain_size()

    # -- jobs ------------------------------------------------------------------

    def dispatch(self, job: jobs.ClaimedJob, depth: int = 1, *,
                 own_queue: bool = False) -> bool:
        """Queue ``job`` in a child: an idle one if any (never with ``own_queue``),
        else the least loaded child holding fewer than ``depth`` (1: only an idle
        child) and, with ``own_queue``, running a job of that queue. Its deadlines are
        armed at the head of that child's queue and again at its START. False if no
        child has room; args too large for a RUN frame fail at once (kind ``args``).
        Frames for busy children go out at ``push``."""
        now = self._clock()
        if self._idle and not own_queue:
            child = self._idle[0]
            if not child.run(job, now, depth):
                self._too_large(child, job)
                return True
            self._idle.popleft()
            due = child.deadline()  # the sooner of its timeout and its first heartbeat
            if self._due is None or due < self._due:
                self._due = due
        else:
            child = self._roomiest(depth, job.queue if own_queue else None)
            if child is None:
                return False
            if not child.run(job, now, depth):
                self._too_large(child, job)
                return True
            self._pushing.add(child)
        self._in_flight[job.id] = child
        return True

    def _too_large(self, child: ChildProcess, job: jobs.ClaimedJob) -> None:
        # It fails at once, as if it had started: every job sent is started or returned.
        self._outcomes.append(JobStarted(job))
        self._outcomes.append(child.too_large(job))

    def _roomiest(self, depth: int, queue: str | None) -> ChildProcess | None:
        best = None
        most = 0
        for child in self._children.values():
            room = child.room(depth)
            if room > most and (queue is None or (child.jobs and child.jobs[0].queue == queue)):
                best, most = child, room
        return best

    def push(self) -> None:
        """Write the jobs ``dispatch`` queued for busy children, one write per child."""
        pushing = self._pushing
        if pushing:
            for child in pushing:
                child.push()
            pushing.clear()

    def cancel(self, job_id: int) -> bool:
        """Stop ``job_id`` here: a running job's child is killed (SIGTERM, grace,
        SIGKILL) and the job reported as ``cancelled``; a queued one is taken back and
        never starts (reported as returned, not to be run). False if that job is not
        held here."""
        child = self._in_flight.get(job_id)
        if child is None:
            return False
        if child.state != BUSY:
            return False
        now = self._clock()
        job = child.skip(job_id, now)
        if job is None:  # it is the running one
            self._kill(child, now, jobs.FAIL_CANCELLED, "cancelled while running")
            return True
        del self._in_flight[job_id]
        self._outcomes.append(JobReturned(job, "cancelled before it started", False))
        self._idle_if_empty(child)
        return True

    def _idle_if_empty(self, child: ChildProcess) -> None:
        if not child.jobs:
            child.state = IDLE
            child.limit = states.NO_LIMIT
            self._idle.append(child)

    def take_back(self, queue: str) -> int:
        """Ask children for the jobs of ``queue`` queued unstarted (a paused queue starts
        nothing more): each comes back as ``JobReturned(release=True)`` when its child
        says it dropped it, or runs if it took it first. Returns how many were asked."""
        asked = 0
        why = f"queue {queue} paused"
        for child in list(self._children.values()):
            if child.state != BUSY:
                continue
            for job in [j for j in child.jobs if j.queue == queue]:
                asked += child.recall(job.id, why)
        return asked

    # -- events from the selector ----------------------------------------------

    def handle_event(self, key: selectors.SelectorKey, mask: int) -> None:
        """Read a child's frames or flush its queued writes."""
        child = self._by_fd.get(key.fd)
        if child is None:
            return
        if key.fd == child.read_fd:
            if mask & selectors.EVENT_READ:
                outcomes = self._outcomes
                mark = len(outcomes)
                now = self._clock()
                seen = child.read(now, outcomes)
                if seen & ~states.GOT_DATA:  # more than bytes: something to decide
                    self._after_read(child, seen, outcomes, mark, now)
        elif mask & selectors.EVENT_WRITE:
            child.flush()

    def _after_read(self, child: ChildProcess, seen: int, outcomes: list, mark: int,
                    now: float) -> None:
        if seen & states.ANSWERED:
            in_flight = self._in_flight
            for outcome in outcomes[mark:]:
                if type(outcome) in _ENDS:
                    in_flight.pop(outcome.job.id, None)
            if child.state != BUSY:
                pass  # being killed or already dead: the answers still count
            elif seen & states.LAST:
                # The child exits right after this frame: never dispatch to it again.
                self._stop(child, now, "recycling: its job or memory limit was reached",
                           told=False)
            elif child.retire_after_job or self._stopping:
                self._retire(child, now, "retiring after its job")
            elif child.max_jobs is not None and child.jobs_done >= child.max_jobs:
                self._retire(child, now, "job limit reached")
            elif guards.peaked(self._os, self.settings, child):
                self._retire(child, now, "recycling: its peak RSS passed the memory limit")
            elif not child.jobs:
                child.state = IDLE
                self._idle.append(child)
            else:
                self._arm(child.deadline())
        elif seen & states.STARTED:
            self._arm(child.deadline())
        if seen & states.RETURNED:
            for outcome in outcomes[mark:]:
                if type(outcome) is JobReturned:
                    self._in_flight.pop(outcome.job.id, None)
            if child.state == BUSY and not seen & states.ANSWERED:
                self._idle_if_empty(child)
        if seen & states.STARTED_SKIPPED:
            self._kill(child, now, None, "started a job it was told to skip",
                       signal.SIGKILL)
        if seen & states.READIED:
            self._on_ready(child, now)
        if seen & states.BROKEN:
            self._kill(child, now, jobs.FAIL_CRASHED,
                       f"child {child.pid} broke the wire protocol: {child.broken}",
                       signal.SIGKILL)

    def _retire(self, child: ChildProcess, now: float, why: str) -> None:
        """No more jobs for a busy child: STOP now. It finishes its running job (and any
        it takes before reading STOP); what it never started comes back when it exits,
        the one proof (taken back with SKIP here, jobs ran twice in the kill storm)."""
        child.retire_after_job = True
        child.tell_stop()
        if not child.started:
            self._stop(child, now, why, told=False)

    def _on_ready(self, child: ChildProcess, now: float) -> None:
        self._crashes.ready()
        self._respawn.ready()
        self._event(child, "ready", "")
        if child.state != BOOTING:
            return
        if self._stopping or child.retire_after_job:
            self._stop(child, now, "pool stopping" if self._stopping else "recycling all")
            return
        child.state = IDLE
        self._idle.append(child)

    # -- deadlines and kills ---------------------------------------------------

    def tick(self) -> None:
        """Enforce every deadline that has passed and fork replacements. Raises
        ``PoolHalted`` once, at the first tick after children crash-looped at boot;
        later ticks keep enforcing deadlines (kills still escalate) and fork nothing."""
        self.push()
        due = self._due
        if due is not None:
            now = self._clock()
            if now - due > self._nap:
                guards.rearm_after_nap(self._children.values(), self.settings, now,
                                       now - due, self._log)
            if now >= due:
                self._enforce_deadlines(now)
                self._due = self._earliest()
        if self._size_dirty:
            self._maintain_size()
        if self._halted and not self._halt_raised:
            self._halt_raised = True
            raise PoolHalted(self._halted)

    def _earliest(self) -> float | None:
        dues = [due for due in (c.deadline() for c in self._children.values())
                if due is not None]
        if self._respawn.due is not None:
            dues.append(self._respawn.due)
        return min(dues, default=None)

    def _arm(self, when: float | None) -> None:
        if when is not None and (self._due is None or when < self._due):
            self._due = when

    def _check_memory(self, child: ChildProcess, now: float) -> None:
        why = guards.over_memory(self._os, self.settings, child)
        if why is not None:
            # SIGKILL at once: a grace would only let it grow further.
            self._kill(child, now, jobs.FAIL_MEMORY, why, signal.SIGKILL)
        else:
            child.mem_deadline = now + self.settings.memory_sample_interval()

    def _enforce_deadlines(self, now: float) -> None:
        settings = self.settings
        for child in list(self._children.values()):
            overdue = child.overdue(now)
            if overdue == "job":
                self._kill(child, now, jobs.FAIL_TIMEOUT, f"ran past its {child.timeout} s timeout")
            elif overdue == "heartbeat":
                self._kill(child, now, jobs.FAIL_HUNG,
                           f"no heartbeat for {settings.heartbeat_timeout} s")
            elif overdue == "memory":
                self._check_memory(child, now)
            elif overdue == "boot":
                self._kill(child, now, None, f"not ready within {settings.boot_timeout} s",
                           signal.SIGKILL, boot=True)
            elif overdue == "exit":
                self._log.warning("%s did not exit in time: SIGKILL to its group",
                                  child.describe())
                child.escalate()

    def _kill(self, child: ChildProcess, now: float, kind: str | None, message: str,
              sig: int = signal.SIGTERM, *, boot: bool = False) -> None:
        """Signal the child's whole group; with SIGTERM, SIGKILL follows after the
        grace. ``kind`` is what the job in flight, if any, failed of."""
        if not child.can_signal(sig):
            return
        if child.state == IDLE:
            self._idle.remove(child)
        child.kill(sig, now, kind, message, boot=boot)
        self._arm(child.exit_deadline)
        self._size_dirty = True
        self._event(child, "killed", message)

    def _stop(self, child: ChildProcess, now: float, why: str, *, told: bool = True) -> None:
        if child.state == IDLE:
            self._idle.remove(child)
        child.stop(now, told=told)
        self._arm(child.exit_deadline)
        self._size_dirty = True
        self._event(child, "stopping", why)

    def _event(self, child: ChildProcess, what: str, detail: str) -> None:
        self._outcomes.append(ChildEvent(child.pid, child.worker_no, what, detail))
        self._log.debug("%s %s %s", child.describe(), what, detail)

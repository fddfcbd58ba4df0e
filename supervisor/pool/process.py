"""One forked child as the parent sees it: its pipes, its frames, its queue of jobs and
their deadlines.

A ``ChildProcess`` owns the parent's ends of one child's pipes (registered with the
parent's selector, with the pool as the key's data), the ``FrameReader`` and
``FrameWriter`` on them, the jobs it was sent and has not answered (``jobs``, in the
order the child runs them: the head runs once its START came, the rest are queued and
unstarted) and every deadline the head job and the child's life carry. It sends
(``run``, ``skip``, ``stop``), signals (``kill``), reads and reports (``read`` returns
what the frames meant; outcomes go into the list it is given), and winds itself up once
reaped (``close``: the running job fails, the queued ones come back unstarted). It
decides nothing: which child gets a job, when one is stopped or killed and what
replaces it is ``Pool``'s policy.
"""

from __future__ import annotations

import logging
import selectors
import signal
from collections import deque
from functools import partial

from shared import wire
from shared.jobs import FAIL_ARGS, FAIL_CRASHED, ClaimedJob
from supervisor.pool.oscalls import OsCalls
from supervisor.pool.outcomes import JobFailed, JobReturned
from supervisor.pool.reading import ChildReading
from supervisor.pool.settings import PoolSettings
from supervisor.pool.states import (
    BOOTING,
    BUSY,
    DEAD,
    IDLE,
    KILLED,
    NO_LIMIT,
    STOPPING,
)

EVENT_READ = selectors.EVENT_READ
EVENT_WRITE = selectors.EVENT_WRITE

_pack_run = wire.Run.pack
_STOP_FRAME = wire.Stop().encode()


class ChildProcess(ChildReading):
    """One child from fork until it is reaped: pipes, frames, job and deadlines."""

    __slots__ = (
        "_log",
        "_max_frame",
        "_os",
        "_sel",
        "_settings",
        "_tag",
        "_write",
        "beat_deadline",
        "boot_deadline",
        "boot_error",
        "broken",
        "exit_deadline",
        "expected_exit",
        "job_deadline",
        "job_started",
        "jobs",
        "jobs_done",
        "kill_kind",
        "kill_message",
        "limit",
        "max_jobs",
        "mem_deadline",
        "outgoing",
        "pid",
        "read_fd",
        "read_open",
        "reader",
        "ready",
        "recalling",
        "retire_after_job",
        "sent",
        "sigkilled",
        "skipping",
        "spawned_at",
        "started",
        "state",
        "stop_sent",
        "timeout",
        "worker_no",
        "write_fd",
        "write_registered",
        "writer",
    )

    def __init__(self, pid: int, worker_no: int, read_fd: int, write_fd: int, *,
                 max_jobs: int | None, now: float, settings: PoolSettings,
                 oscalls: OsCalls, selector: selectors.BaseSelector, tag: object,
                 log: logging.Logger) -> None:
        self.pid = pid
        self.worker_no = worker_no
        self.read_fd = read_fd  # the child's frames arrive here (non-blocking)
        self.write_fd = write_fd  # RUN and STOP go out here (non-blocking)
        self.max_jobs = max_jobs
        self.spawned_at = now
        self.reader = wire.FrameReader(settings.max_frame_bytes)
        self.writer = wire.FrameWriter()
        self.state = BOOTING
        self.ready = False
        self.jobs: deque[ClaimedJob] = deque()  # sent, unanswered, in running order
        self.started = False  # the head of ``jobs`` runs: its START came
        self.skipping: set[int] = set()  # told SKIP: must never START
        # Asked back with SKIP, still queued here until the child says SKIPPED (it never
        # ran: returned, to be released) or START (it took it first: it runs).
        self.recalling: dict[int, str] = {}
        self.limit = NO_LIMIT  # jobs it may hold: the least depth of those it holds
        self.sent = 0  # jobs ever sent (never more than its max_jobs)
        self.outgoing: list[bytes] = []  # RUN frames for a busy child, sent by ``push``
        self.stop_sent = False
        self.job_started = 0.0
        self.timeout: float | None = None
        self.job_deadline: float | None = None
        self.beat_deadline: float | None = None
        self.mem_deadline: float | None = None  # next RSS sample (a memory limit is set)
        self.boot_deadline: float | None = now + settings.boot_timeout
        self.exit_deadline: float | None = None  # STOP or SIGTERM sent: SIGKILL then
        self.retire_after_job = False
        self.expected_exit = False  # the parent asked it to go: not a boot failure
        self.sigkilled = False
        self.kill_kind: str | None = None  # failure kind for the job if the kill ends it
        self.kill_message: str | None = None
        self.boot_error: str | None = None  # what the child said before dying at boot
        self.broken: str | None = None  # why its frames cannot be trusted
        self.read_open = True
        self.write_registered = False
        self.jobs_done = 0
        self._settings = settings
        self._max_frame = wire.HEADER_SIZE + settings.max_frame_bytes  # a whole frame
        self._os = oscalls
        self._sel = selector
        self._tag = tag  # the selector key's data: the loop hands the event to the pool
        self._log = log
        self._write = partial(oscalls.write, write_fd)
        selector.register(read_fd, EVENT_READ, tag)

    def describe(self) -> str:
        """``worker 3 (pid 1234)``, for messages."""
        return f"worker {self.worker_no} (pid {self.pid})"

    @property
    def job(self) -> ClaimedJob | None:
        """The head of its queue: the job it runs (or is about to start), or None."""
        jobs = self.jobs
        return jobs[0] if jobs else None

    def room(self, depth: int) -> int:
        """How many more jobs it may take whose queue holds ``depth`` per child: none
        once told to stop, past its job limit, or holding a job that wants a child
        to itself (``limit``)."""
        if self.stop_sent or self.retire_after_job or self.state not in (IDLE, BUSY):
            return 0
        room = min(self.limit, depth) - len(self.jobs)
        if self.max_jobs is not None:
            room = min(room, self.max_jobs - self.sent)
        return room

    def deadline(self) -> float | None:
        """The earliest moment the parent must look at this child again."""
        state = self.state
        if state == BUSY:
            dues = [d for d in (self.beat_deadline, self.job_deadline, self.mem_deadline)
                    if d is not None]
            return min(dues, default=None)
        if state == BOOTING:
            return self.boot_deadline
        return self.exit_deadline

    def overdue(self, now: float) -> str | None:
        """Which of its deadlines has passed: ``job`` (timeout), ``heartbeat``,
        ``memory`` (sample its RSS), ``boot``, ``exit`` (asked to go), or None."""
        state = self.state
        if state == BUSY:
            if self.job_deadline is not None and now >= self.job_deadline:
                return "job"
            if self.beat_deadline is not None and now >= self.beat_deadline:
                return "heartbeat"
            if self.mem_deadline is not None and now >= self.mem_deadline:
                return "memory"
        elif state == BOOTING:
            if self.boot_deadline is not None and now >= self.boot_deadline:
                return "boot"
        elif self.exit_deadline is not None and now >= self.exit_deadline:
            return "exit"
        return None

    # -- sending ---------------------------------------------------------------

    def run(self, job: ClaimedJob, now: float, depth: int = 1) -> bool:
        """Queue ``job`` in the child (``depth``: how many its queue holds per child).
        To an idle child the RUN frame goes at once and the job's deadlines are armed
        (again at its START); behind other jobs it waits in ``outgoing`` for ``push``,
        so one turn's jobs for a child travel in one write. False, and nothing sent or
        changed, if its RUN frame would be over the frame cap."""
        data = _pack_run(job.id, job.kind, job.queue, job.attempt, job.max_attempts,
                         job.args_json, job.trace_context)
        if len(data) > self._max_frame:
            return False
        jobs = self.jobs
        jobs.append(job)
        self.sent += 1
        if len(jobs) == 1:
            self.state = BUSY
            self.limit = depth
            self._arm_head(job, now)
            self.send(data)
        else:
            if depth < self.limit:
                self.limit = depth
            self.outgoing.append(data)
        return True

    def push(self) -> None:
        """Write the RUN frames ``run`` queued, in one write."""
        if self.outgoing:
            self.send(b"")

    def _arm_head(self, job: ClaimedJob, now: float) -> None:
        """The deadlines of the job at the head: its timeout (already resolved; None
        or 0: none), its heartbeat (until its START comes, the start is awaited that
        long), the memory sample."""
        timeout = job.timeout
        self.job_started = now
        self.timeout = timeout
        self.job_deadline = now + timeout if timeout else None
        self.beat_deadline = now + self._settings.heartbeat_timeout
        if self._settings.max_memory_per_child:
            self.mem_deadline = now + self._settings.memory_sample_interval()

    def skip(self, job_id: int, now: float) -> ClaimedJob | None:
        """Take a queued, unstarted job back and tell the child to skip it. Returns
        the job, or None if it is not queued here (unknown, or already running)."""
        jobs = self.jobs
        i = next((i for i, job in enumerate(jobs) if job.id == job_id), None)
        if i is None or (i == 0 and self.started):
            return None
        job = jobs[i]
        del jobs[i]
        self.skipping.add(job_id)
        self.send(wire.Skip(job_id).encode())
        if i == 0 and jobs:
            self._arm_head(jobs[0], now)
        return job

    def recall(self, job_id: int, why: str) -> bool:
        """Ask the child to give back a job queued here that it has not started: SKIP
        now; the job stays in the queue until the child answers. Unlike ``skip`` this
        never races: a child done with the jobs ahead of it may already have taken it,
        and only its SKIPPED or START says which. False if the job is not queued here
        (unknown, running, or already asked for)."""
        jobs = self.jobs
        i = next((i for i, job in enumerate(jobs) if job.id == job_id), None)
        if i is None or (i == 0 and self.started) or job_id in self.recalling:
            return False
        self.recalling[job_id] = why
        self.send(wire.Skip(job_id).encode())
        return True

    def too_large(self, job: ClaimedJob) -> JobFailed:
        """The failure of a job whose args cannot fit in a RUN frame."""
        return JobFailed(job, FAIL_ARGS, f"args are {len(job.args_json.encode())} bytes of "
                         f"JSON; a RUN frame holds at most {self._settings.max_frame_bytes}"
                         "-byte bodies", None, None, True, 0.0)

    def stop(self, now: float, *, told: bool = True) -> None:
        """Send STOP (``told=False``: its last answer said it leaves anyway): the child
        finishes and exits; SIGKILL follows if it has not by the exit deadline (a
        booting child first gets its boot time)."""
        grace = self._settings.kill_grace
        if self.state == BOOTING:
            grace += self._settings.boot_timeout
        self.state = STOPPING
        self.expected_exit = True
        self.exit_deadline = now + grace
        if told:
            self.tell_stop()

    def tell_stop(self) -> None:
        """Send STOP once: the child finishes its running job and starts none of its
        queued ones (they come back when it exits)."""
        if not self.stop_sent:
            self.stop_sent = True
            self.send(_STOP_FRAME)

    def send(self, data: bytes) -> None:
        """Write ``data`` (after any RUN frames ``run`` queued) now if the pipe takes
        it, else queue it and ask the selector for writability."""
        if self.outgoing:
            self.outgoing.append(data)
            data = b"".join(self.outgoing)
            self.outgoing.clear()
        try:
            done = self.writer.send(data, self._write)
        except OSError:
            # The child is gone (EPIPE); reaping it reports its job.
            self.writer.clear()
            return
        if not done and not self.write_registered:
            self._sel.register(self.write_fd, EVENT_WRITE, self._tag)
            self.write_registered = True

    def flush(self) -> None:
        """The pipe is writable again: write what is queued."""
        try:
            done = self.writer.flush(self._write)
        except OSError:
            self.writer.clear()
            done = True
        if done and self.write_registered:
            self._sel.unregister(self.write_fd)
            self.write_registered = False

    # -- signals ---------------------------------------------------------------

    def can_signal(self, sig: int) -> bool:
        """False if signalling adds nothing: reaped, SIGKILLed already, or a second
        SIGTERM."""
        state = self.state
        return not (state == DEAD or (state == KILLED and
                                      (self.sigkilled or sig != signal.SIGKILL)))

    def kill(self, sig: int, now: float, kind: str | None, message: str, *,
             boot: bool = False) -> None:
        """Signal the child's whole group; after SIGTERM, SIGKILL is due at the exit
        deadline. ``kind`` is what the job in flight, if any, fails of; ``boot``: a
        boot failure, not an exit the parent expected."""
        if self.job is not None and kind is not None and self.kill_kind is None:
            self.kill_kind = kind
            self.kill_message = message
        self.expected_exit = self.expected_exit or not boot
        self.state = KILLED
        self._kill_escaped()
        self._os.killpg(self.pid, sig)
        if sig == signal.SIGKILL:
            self.sigkilled = True
            self.exit_deadline = None
        else:
            # A stopped process holds SIGTERM pending until it runs again.
            self._os.killpg(self.pid, signal.SIGCONT)
            self.exit_deadline = now + self._settings.kill_grace

    def _kill_escaped(self) -> None:
        # Descendants that left the group (setsid) miss its signal: SIGKILL them while
        # the child still links them to us; once it dies they are re-parented away.
        for pid in self._os.escaped(self.pid):
            self._os.kill(pid, signal.SIGKILL)

    def escalate(self) -> None:
        """It outlived its exit deadline: SIGKILL its group."""
        self._kill_escaped()
        self._os.killpg(self.pid, signal.SIGKILL)
        self.sigkilled = True
        self.exit_deadline = None

    # -- winding up ------------------------------------------------------------

    def close(self, now: float, outcomes: list, how: str) -> None:
        """The child was reaped (``how``: its exit in words): read what it left in the
        pipe, close both ends, kill whatever it left running in its group, report its
        running job, if any, as failed and its queued jobs as returned unstarted."""
        self.state = DEAD
        self.drain(now, outcomes)
        self._close_read()
        if self.write_registered:
            self._sel.unregister(self.write_fd)
            self.write_registered = False
        self._os.close(self.write_fd)
        self.writer.clear()
        self._os.killpg(self.pid, signal.SIGKILL)
        self.outgoing.clear()
        jobs = self.jobs
        if jobs and self.started:
            outcomes.append(JobFailed(jobs.popleft(), self.kill_kind or FAIL_CRASHED,
                                      self.kill_message or how, None, None, False,
                                      now - self.job_started))
        self.started = False
        recalling = self.recalling
        while jobs:
            job = jobs.popleft()
            outcomes.append(JobReturned(job, f"never started: {how}", True,
                                        release=job.id in recalling))
        recalling.clear()

    def _close_read(self) -> None:
        if not self.read_open:
            return
        self.read_open = False
        self._sel.unregister(self.read_fd)
        self._os.close(self.read_fd)

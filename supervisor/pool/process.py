"""One forked child as the parent sees it: its pid, its pipes, its queue of jobs and
their deadlines, from its fork to its reaping.

A ``ChildProcess`` is one child from fork until it is reaped, as uvicorn's ``Process``
wraps one worker. It owns the parent's ends of the child's pipes (registered with the
parent's selector, with the pool as the key's data), the ``FrameReader`` and
``FrameWriter`` on them, the jobs it was sent and has not answered (``jobs``, in the
order the child runs them: the head runs once its START came, the rest are queued and
unstarted), the deadlines of the child's life, and the head job's record (``Head``, in
``head.py``: made when a job reaches the head, dropped at its answer).

It sends (``run``, ``push``, ``skip``, ``recall``, ``stop``), signals (``kill``,
``escalate``), reads (``read``: what the frames meant, as typed news in the order
they were said) and winds itself up once reaped (``close``: the running job fails, the
queued ones come back unstarted). What a frame means is ``news.hear``'s; it moves the
child through the verbs of its life here (``booted``, ``took``, ``answered``,
``take_out``, ``broke``). It decides nothing: which child gets a job, when one
is stopped or killed and what replaces it is ``Pool``'s policy, made from the events
``read`` returns.

The states a child goes through, as the parent sees it::

    BOOTING --READY--> IDLE --run--> BUSY --last answer, queue empty--> IDLE
       |                 |            |
       +------stop-------+----stop----+--> STOPPING --exit--> (reaped) DEAD
       +------kill-------+----kill----+--> KILLED ----exit--> (reaped) DEAD

A START that crosses a STOP (the child took its next job before it read STOP) brings a
STOPPING child back to BUSY until that job ends.
"""

from __future__ import annotations

import logging
import selectors
import signal
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from functools import partial

from shared import wire
from shared.jobs import FAIL_ARGS, FAIL_CRASHED, ClaimedJob
from shared.procfs import GroupSample
from supervisor.pool.head import Head, KillVerdict, Notice
from supervisor.pool.killedusage import KilledUsage
from supervisor.pool.news import (
    JOB_RECORDS,
    Broken,
    ChildNews,
    CrossedSkip,
    Leaving,
    Readied,
    hear,
)
from supervisor.pool.oscalls import OsCalls
from supervisor.pool.outcomes import JobFailed, JobRecord, JobReturned, ReturnTo
from supervisor.pool.settings import PoolSettings

# The news of a child's frames is ``news``'s; it is named here too, where the pool and
# the tests have always found it.
__all__ = ["ACTIVE_STATES", "BOOTING", "BUSY", "DEAD", "IDLE", "KILLED", "NO_LIMIT",
           "STOPPING", "Broken", "ChildNews", "ChildProcess", "ChildState", "CrossedSkip",
           "Leaving", "Overdue", "Readied", "Recall"]


class ChildState(StrEnum):
    """A child's state, as the parent sees it (its value is what ``status`` shows)."""

    BOOTING = "booting"  # forked, READY not seen yet
    IDLE = "idle"  # ready for a job
    BUSY = "busy"  # jobs in flight: the head running (or about to), the rest queued
    STOPPING = "stopping"  # told STOP, or its last answer said so, running nothing: to exit
    KILLED = "killed"  # signalled by the parent: waiting to reap it
    DEAD = "dead"  # reaped; the record is being wound up


BOOTING = ChildState.BOOTING
IDLE = ChildState.IDLE
BUSY = ChildState.BUSY
STOPPING = ChildState.STOPPING
KILLED = ChildState.KILLED
DEAD = ChildState.DEAD

ACTIVE_STATES = frozenset({BOOTING, IDLE, BUSY})  # count toward the pool's size


class Overdue(StrEnum):
    """Which of a child's deadlines has passed (``ChildProcess.overdue``)."""

    JOB = "job"  # its head ran past its timeout
    HEARTBEAT = "heartbeat"  # its head was silent for its heartbeat timeout
    NOTICE = "notice"  # a stop notice's grace is over
    MEMORY = "memory"  # its RSS is due for a sample
    OVERRUN = "overrun"  # its head ran past its kind's p95
    BOOT = "boot"  # not ready within the boot timeout
    EXIT = "exit"  # asked to go and still there


NO_LIMIT = 2**30  # what an empty child may hold (more than any depth): its next job sets it


@dataclass(frozen=True, slots=True)
class Recall:
    """Why a queued job was asked back, and where it goes once given back: to the
    database (its queue was paused, the database is away) or to another child."""

    why: str
    to: ReturnTo


# What each of ``Head.deadlines`` means once it passed, in the same order.
_HEAD_DEADLINES = (Overdue.JOB, Overdue.HEARTBEAT, Overdue.NOTICE, Overdue.MEMORY,
                   Overdue.OVERRUN)

READ_CHUNK = 64 * 1024
EVENT_READ = selectors.EVENT_READ
EVENT_WRITE = selectors.EVENT_WRITE

_pack_run = wire.Run.pack
_STOP_FRAME = wire.Stop().encode()


class ChildProcess:
    """One child from fork until it is reaped: pipes, frames, jobs and deadlines. The
    job at the head of its pipe and all it carries is ``head`` (a ``Head``, made when
    that job reaches the head and dropped at its answer)."""

    __slots__ = (
        "_log",
        "_max_frame",
        "_os",
        "_sel",
        "_settings",
        "_tag",
        "_write",
        "boot_deadline",
        "boot_error",
        "broken",
        "exit_deadline",
        "expected_exit",
        "head",
        "jobs",
        "jobs_done",
        "killed_usage",
        "limit",
        "max_jobs",
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
        "state",
        "stop_sent",
        "threads",
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
        # Native pool threads a child has (None: as the libraries set): a job reserving
        # n CPUs gets n times that.
        self.threads = settings.native_threads
        self.spawned_at = now
        self.reader = wire.FrameReader(settings.max_frame_bytes)
        self.writer = wire.FrameWriter()
        self.state = BOOTING
        self.ready = False
        self.jobs: deque[ClaimedJob] = deque()  # sent, unanswered, in running order
        self.head: Head | None = None  # the first of ``jobs``, as it is watched
        self.skipping: set[int] = set()  # told SKIP: must never START
        # Asked back with SKIP, still queued here until the child says SKIPPED (it never
        # ran: returned, released or given to another child) or START (it took it
        # first: it runs).
        self.recalling: dict[int, Recall] = {}
        self.limit = NO_LIMIT  # jobs it may hold: the least depth of those it holds
        self.sent = 0  # jobs ever sent (never more than its max_jobs)
        self.outgoing: list[bytes] = []  # RUN frames for a busy child, sent by ``push``
        self.stop_sent = False
        self.boot_deadline: float | None = now + settings.boot_timeout
        self.exit_deadline: float | None = None  # STOP or SIGTERM sent: SIGKILL then
        self.retire_after_job = False  # no more jobs: it stops once it runs none
        self.expected_exit = False  # the parent asked it to go: not a boot failure
        self.sigkilled = False
        # What the running job cost as the parent saw it, for when no answer says so.
        self.killed_usage = KilledUsage()
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

    @property
    def log(self) -> logging.Logger:
        """Where what it does wrong is logged."""
        return self._log

    def describe(self) -> str:
        """``worker 3 (pid 1234)``, for messages."""
        return f"worker {self.worker_no} (pid {self.pid})"

    # -- what the pool asks ------------------------------------------------------

    @property
    def job(self) -> ClaimedJob | None:
        """The head of its queue: the job it runs (or is about to start), or None."""
        jobs = self.jobs
        return jobs[0] if jobs else None

    @property
    def started(self) -> bool:
        """The head of its queue runs: its START came."""
        head = self.head
        return head is not None and head.started

    @property
    def overrun(self) -> bool:
        """Its head overran: no more jobs until that one ends."""
        head = self.head
        return head is not None and head.overrun

    @property
    def job_started(self) -> float | None:
        """When the head's clock started (its START, or its arrival at the head)."""
        head = self.head
        return head.armed_at if head is not None else None

    @property
    def job_deadline(self) -> float | None:
        """When the head runs past its timeout (None: no head, or no timeout)."""
        head = self.head
        return head.job_deadline if head is not None else None

    @property
    def beat_deadline(self) -> float | None:
        """When the head's silence is judged next (None: no head)."""
        head = self.head
        return head.beat_deadline if head is not None else None

    @property
    def recall_at(self) -> float | None:
        """When the head overruns and what queues behind it is recalled (None: no
        head, not started, or looked at already)."""
        head = self.head
        return head.recall_at if head is not None else None

    def room(self, depth: int) -> int:
        """How many more jobs it may take whose queue holds ``depth`` per child: none
        once told to stop, past its job limit, or holding a job that wants a child
        to itself (``limit``)."""
        if (self.stop_sent or self.retire_after_job or self.overrun
                or self.state not in (IDLE, BUSY)):
            return 0
        room = min(self.limit, depth) - len(self.jobs)
        if self.max_jobs is not None:
            room = min(room, self.max_jobs - self.sent)
        return room

    def deadline(self) -> float | None:
        """The earliest moment the parent must look at this child again."""
        state = self.state
        if state == BUSY:
            head = self.head
            if head is None:
                return None
            return min((d for d in head.deadlines() if d is not None), default=None)
        if state == BOOTING:
            return self.boot_deadline
        return self.exit_deadline

    def overdue(self, now: float) -> Overdue | None:
        """Which of its deadlines has passed (the first, in ``Overdue``'s order), or
        None."""
        state = self.state
        if state == BUSY:
            head = self.head
            if head is None:
                return None
            # A notice's grace that ran out comes before a memory sample: the kill is
            # due whatever the sample would say.
            for due, which in zip(head.deadlines(), _HEAD_DEADLINES, strict=True):
                if due is not None and now >= due:
                    return which
        elif state == BOOTING:
            if self.boot_deadline is not None and now >= self.boot_deadline:
                return Overdue.BOOT
        elif self.exit_deadline is not None and now >= self.exit_deadline:
            return Overdue.EXIT
        return None

    # -- what the pool decides about it ------------------------------------------

    def become_idle(self) -> None:
        """It holds no job and may be given one."""
        self.state = IDLE
        self.limit = NO_LIMIT

    def retire(self) -> None:
        """No more jobs: STOP now if it has booted (a booting child is stopped once it
        is ready). It finishes its running job and any it takes before reading STOP."""
        self.retire_after_job = True
        if self.state != BOOTING:
            self.tell_stop()

    def silent(self, now: float, sample: GroupSample | None) -> str | None:
        """Its heartbeat deadline passed: judge its head from ``sample`` (its group's
        CPU time and its state, read now; None: unreadable), as ``Head.silent`` says.
        Returns why it is hung, or None when it is only busy or not judged yet."""
        head = self.head
        if head is None:
            return None
        return head.silent(now, sample, self._settings)

    def memory_sampled(self, now: float) -> None:
        """Its RSS was under the cap: sample it again after the interval."""
        if self.head is not None:
            self.head.mem_deadline = now + self._settings.memory_sample_interval()

    def after_nap(self, now: float, late: float) -> None:
        """The parent did not run for ``late`` seconds past a deadline, so it could not
        hear this child: a busy one gets a fresh heartbeat window, a booting one the
        lost time again. Job timeouts stand: they are the job's budget of wall time."""
        if self.state == BUSY and self.head is not None:
            self.head.after_nap(now)
        elif self.state == BOOTING and self.boot_deadline is not None:
            self.boot_deadline = max(self.boot_deadline, now) + late

    # -- sending -----------------------------------------------------------------

    def run(self, job: ClaimedJob, now: float, depth: int = 1) -> bool:
        """Queue ``job`` in the child (``depth``: how many its queue holds per child).
        To an idle child the RUN frame goes at once and the job's deadlines are armed
        (again at its START); behind other jobs it waits in ``outgoing`` for ``push``,
        so one turn's jobs for a child travel in one write. False, and nothing sent or
        changed, if its RUN frame would be over the frame cap."""
        cpus = job.cpus
        # A job that reserved several CPUs gets that many children's native threads.
        threads = cpus * self.threads if (cpus is not None and cpus > 1
                                          and self.threads is not None) else None
        data = _pack_run(job.id, job.kind, job.queue, job.attempt, job.max_attempts,
                         job.args_json, job.trace_context, job.checkpoint, job.expires_at,
                         threads, job.devices)
        if len(data) > self._max_frame:
            return False
        jobs = self.jobs
        jobs.append(job)
        self.sent += 1
        if len(jobs) == 1:
            self.state = BUSY
            self.limit = depth
            self._arm_head(now)
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

    def _arm_head(self, now: float) -> None:
        """A fresh record for the job now at the head of ``jobs`` (none left: no head).
        A kill verdict passed on the child carries over: it ends whichever job the
        child holds, unless an answer came first."""
        old = self.head
        kill = old.kill if old is not None else None
        jobs = self.jobs
        if not jobs:
            self.head = None
            return
        self.head = Head.arm(jobs[0], now, self._settings, kill=kill)
        self.killed_usage.armed()

    def skip(self, job_id: int, now: float) -> ClaimedJob | None:
        """Take a queued, unstarted job back and tell the child to skip it. Returns
        the job, or None if it is not queued here (unknown, or already running)."""
        at = self.queued_at(job_id)
        if at is None:
            return None
        self.skipping.add(job_id)
        self.send(wire.Skip(job_id).encode())
        return self.take_out(at, now)

    def recall(self, job_id: int, why: str, *, release: bool = True) -> bool:
        """Ask the child to give back a job queued here that it has not started: SKIP
        now; the job stays in the queue until the child answers. Unlike ``skip`` this
        never races: a child done with the jobs ahead of it may already have taken it,
        and only its SKIPPED or START says which. False if the job is not queued here
        (unknown, running, or already asked for). ``release``: once given back it goes
        to the database, else to another child."""
        if job_id in self.recalling or self.queued_at(job_id) is None:
            return False
        self.recalling[job_id] = Recall(why, ReturnTo.DATABASE if release else ReturnTo.CHILD)
        self.send(wire.Skip(job_id).encode())
        return True

    def notify(self, reason: str, kind: str, message: str,
               deadline: float | None) -> ClaimedJob | None:
        """Send the running job a stop notice (issue 28), once: its handler sees
        ``stopping`` (and ``Stopping``, if it opted in). ``kind``: what a ``Stopping``
        it lets out, or the kill at ``deadline`` (None: no kill of its own), fails it
        as. Returns the job, or None if no job runs here (or it was told already)."""
        head = self.head
        if head is None or not head.started or head.notice is not None:
            return None
        head.notice = Notice(reason, kind, message, deadline)
        self.send(wire.Stopping(head.job.id, reason).encode())
        return head.job

    def checkpoint_written(self, job_id: int, written: bool) -> None:
        """Tell a handler waiting on a flushed checkpoint that it was written."""
        if self.state not in (DEAD, KILLED):
            self.send(wire.Checkpointed(job_id, written).encode())

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

    # -- reading -----------------------------------------------------------------

    def read(self, now: float) -> list[ChildNews]:
        """One read from the child's pipe: what its frames meant, in the order it
        said them (``news.hear``; empty: nothing there, only heartbeats, or end of
        file, after which ``read_open`` is False)."""
        news: list[ChildNews] = []
        self._read_once(now, news)
        return news

    def drain(self, now: float) -> list[ChildNews]:
        """Read whatever is left in the pipe (an answer written just before death
        still counts)."""
        news: list[ChildNews] = []
        while self.read_open and self._read_once(now, news):
            pass
        return news

    def _read_once(self, now: float, news: list[ChildNews]) -> bool:
        """One ``read``; True if bytes arrived (the pipe may hold more)."""
        try:
            data = self._os.read(self.read_fd, READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._close_read()
            return False
        hear(self, data, now, news)
        return True

    # -- what its frames do to it (``news.hear``) -------------------------------

    def booted(self) -> None:
        """Its first READY came: it may be given jobs."""
        self.ready = True
        self.boot_deadline = None

    def took(self, now: float) -> ClaimedJob:
        """Its START for the head of its queue came: the job runs here (even if it was
        asked back: it took the job before it read the SKIP), its deadlines count from
        now. Returns the job."""
        job = self.jobs[0]
        self.recalling.pop(job.id, None)
        head = self.head
        if head is None or head.job is not job:  # queued without ``run``: never armed
            head = self.head = Head.arm(job, now, self._settings,
                                        kill=head.kill if head is not None else None)
        self.killed_usage.armed()
        head.start(now, self._settings)
        if self.state == STOPPING:
            # It took the job before it read STOP: the job runs; stop after it.
            self.state = BUSY
            self.exit_deadline = None
            self.retire_after_job = True
        return job

    def answered(self, now: float) -> None:
        """Its head answered: the head's record goes (its notice and kill verdict with
        it) and the next job, if any, is armed; its START follows."""
        jobs = self.jobs
        jobs.popleft()
        self.head = None
        self.jobs_done += 1
        if jobs:
            self._arm_head(now)
        else:
            self.limit = NO_LIMIT

    def queued_at(self, job_id: int) -> int | None:
        """Where ``job_id`` waits in its queue, unstarted (None: not held here, or it
        runs)."""
        jobs = self.jobs
        at = next((i for i, job in enumerate(jobs) if job.id == job_id), None)
        if at is None or (at == 0 and self.started):
            return None
        return at

    def take_out(self, at: int, now: float) -> ClaimedJob:
        """Remove the unstarted job at ``at`` of its queue (``queued_at``); the next one
        is armed if it was the head. Returns the job."""
        jobs = self.jobs
        job = jobs[at]
        del jobs[at]
        if at == 0:
            self._arm_head(now)
        return job

    def broke(self, why: str) -> None:
        """A frame could not be trusted: its read end is closed (the pool kills it)."""
        self.broken = why
        self._log.error("%s sent a bad frame: %s", self.describe(), why)
        self._close_read()

    # -- signals -----------------------------------------------------------------

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
        head = self.head
        if head is not None and kind is not None and head.kill is None:
            head.kill = KillVerdict(kind, message)
            if head.started:
                # The one extra read of a kill: the job's last CPU time and RSS.
                self.killed_usage.sampled(self._os.group_sample(self.pid))
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

    # -- winding up --------------------------------------------------------------

    def close(self, now: float, how: str) -> list[JobRecord]:
        """The child was reaped (``how``: its exit in words): read what it left in the
        pipe, close both ends, kill whatever it left running in its group. Returns what
        became of its jobs: what the pipe still said about them, then its running job,
        if any, as failed and its queued jobs as returned unstarted."""
        self.state = DEAD
        records: list[JobRecord] = [news for news in self.drain(now)
                                    if isinstance(news, JOB_RECORDS)]
        self._close_read()
        if self.write_registered:
            self._sel.unregister(self.write_fd)
            self.write_registered = False
        self._os.close(self.write_fd)
        self.writer.clear()
        self._os.killpg(self.pid, signal.SIGKILL)
        self._os.clear_shm(self.pid)  # a killed child removed nothing of its pools'
        self.outgoing.clear()
        jobs = self.jobs
        head = self.head
        if jobs and head is not None and head.started:
            wall = now - head.armed_at
            kill = head.kill
            records.append(JobFailed(jobs.popleft(), kill.kind if kill else FAIL_CRASHED,
                                     kill.message if kill else how, None, None, False,
                                     wall, self.killed_usage.usage(wall)))
        self.head = None
        recalling = self.recalling
        while jobs:
            job = jobs.popleft()
            recall = recalling.get(job.id)
            records.append(JobReturned(job, f"never started: {how}",
                                       recall.to if recall is not None else ReturnTo.CHILD))
        recalling.clear()
        return records

    def _close_read(self) -> None:
        if not self.read_open:
            return
        self.read_open = False
        self._sel.unregister(self.read_fd)
        self._os.close(self.read_fd)

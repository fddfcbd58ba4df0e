"""One forked child as the parent sees it: its pipes, its frames, its job and deadlines.

A ``ChildProcess`` owns the parent's ends of one child's pipes (registered with the
parent's selector, with the pool as the key's data), the ``FrameReader`` and
``FrameWriter`` on them, the job in flight and every deadline that job and the child's
life carry. It sends (``run``, ``stop``), signals (``kill``), reads and reports
(``read`` returns what the frames meant; outcomes for the job go into the list it is
given), and winds itself up once reaped (``close``). It decides nothing: which child
gets a job, when one is stopped or killed and what replaces it is ``Pool``'s policy.
"""

from __future__ import annotations

import logging
import selectors
import signal
from functools import partial

from shared import wire
from shared.jobs import FAIL_ARGS, FAIL_CRASHED, TERMINAL_FAILURES, ClaimedJob
from supervisor.pool.oscalls import OsCalls
from supervisor.pool.outcomes import JobDone, JobFailed, JobProgress
from supervisor.pool.settings import PoolSettings

EVENT_READ = selectors.EVENT_READ
EVENT_WRITE = selectors.EVENT_WRITE
READ_CHUNK = 1 << 16

# Child states, as the parent sees them.
BOOTING = "booting"  # forked, READY not seen yet
IDLE = "idle"  # ready for a job
BUSY = "busy"  # one job in flight
STOPPING = "stopping"  # told STOP, or its last answer said so: expected to exit
KILLED = "killed"  # signalled by the parent: waiting to reap it
DEAD = "dead"  # reaped; the record is being wound up

ACTIVE_STATES = frozenset({BOOTING, IDLE, BUSY})  # count toward the pool's size

# What one ``read`` saw, as bits.
GOT_DATA = 1  # bytes arrived: the pipe may hold more
READIED = 2  # its first READY
ANSWERED = 4  # the job in flight was answered (its outcome is in the list)
LAST = 8  # ... and the child exits right after that answer
BROKEN = 16  # a frame that cannot be trusted: ``broken`` says why; kill the child
CLOSED = 32  # end of file: nothing more will come

_DONE = wire.DONE
_FAILED = wire.FAILED
_HEARTBEAT = wire.HEARTBEAT
_ANSWERS = (_DONE, _FAILED)
_unpack_done = wire.Done.unpack
_decode_failed = wire.Failed.decode
_FLAG_LAST = wire.FLAG_LAST
_pack_run = wire.Run.pack
_STOP_FRAME = wire.Stop().encode()


class ChildProcess:
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
        "job",
        "job_deadline",
        "job_started",
        "jobs_done",
        "kill_kind",
        "kill_message",
        "max_jobs",
        "mem_deadline",
        "pid",
        "read_fd",
        "read_open",
        "reader",
        "ready",
        "retire_after_job",
        "sigkilled",
        "spawned_at",
        "state",
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
        self.job: ClaimedJob | None = None
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

    def run(self, job: ClaimedJob, now: float) -> bool:
        """Send ``job`` and arm its deadlines: its timeout (already resolved; None or
        0: none) and the first heartbeat's. False, and nothing sent or changed, if its
        RUN frame would be over the frame cap (the job's args are too large)."""
        data = _pack_run(job.id, job.kind, job.queue, job.attempt, job.max_attempts,
                         job.args_json, job.trace_context)
        if len(data) > self._max_frame:
            return False
        timeout = job.timeout
        self.state = BUSY
        self.job = job
        self.job_started = now
        self.timeout = timeout
        self.job_deadline = now + timeout if timeout else None
        self.beat_deadline = now + self._settings.heartbeat_timeout
        if self._settings.max_memory_per_child:
            self.mem_deadline = now + self._settings.memory_sample_interval()
        self.send(data)
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
            self.send(_STOP_FRAME)

    def send(self, data: bytes) -> None:
        """Write ``data`` now if the pipe takes it, else queue it and ask the selector
        for writability."""
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

    # -- reading ---------------------------------------------------------------

    def read(self, now: float, outcomes: list) -> int:
        """One read from the child's pipe. Outcomes for its job go into ``outcomes``;
        the return value says what else was seen (``GOT_DATA``, ``READIED``,
        ``ANSWERED``, ``LAST``, ``BROKEN``, ``CLOSED`` bits; 0: nothing there)."""
        try:
            data = self._os.read(self.read_fd, READ_CHUNK)
        except BlockingIOError:
            return 0
        except OSError:
            data = b""
        if not data:
            self._close_read()
            return CLOSED
        try:
            frames = self.reader.feed(data)
        except wire.ProtocolError as exc:
            return self._broke(exc)
        seen = GOT_DATA
        for frame in frames:
            mtype = frame.type
            try:
                if mtype in _ANSWERS:
                    seen |= self._on_answer(frame, now, outcomes)
                elif mtype == _HEARTBEAT:
                    self._on_heartbeat(frame, now, outcomes)
                elif mtype == wire.READY:
                    if not self.ready:
                        self.ready = True
                        self.boot_deadline = None
                        seen |= READIED
                elif mtype == wire.BOOT_ERROR:
                    said = wire.BootError.decode(frame)
                    self.boot_error = f"{said.kind} error: {said.message}"
            except wire.ProtocolError as exc:
                return seen | self._broke(exc)
        return seen

    def drain(self, now: float, outcomes: list) -> None:
        """Read whatever is left in the pipe (an answer written just before death
        still counts)."""
        while self.read_open and self.read(now, outcomes) & GOT_DATA:
            pass

    def _on_answer(self, frame: wire.Frame, now: float, outcomes: list) -> int:
        job = self.job
        if job is None:
            self._log.warning("%s answered with no job in flight", self.describe())
            return 0
        duration = now - self.job_started
        if frame.type == _DONE:
            job_id, result = _unpack_done(frame)
            if job_id != job.id:
                return self._stray(job_id)
            outcomes.append(JobDone(job, result, duration))
        else:
            answer = _decode_failed(frame)
            if answer.job != job.id:
                return self._stray(answer.job)
            kind = answer.kind
            outcomes.append(JobFailed(job, kind, answer.message, answer.traceback,
                                      answer.retry_delay, kind in TERMINAL_FAILURES,
                                      duration))
        self.job = None  # its deadlines are ignored from now on: deadline() is by state
        if self.kill_kind is not None:
            self.kill_kind = self.kill_message = None
        self.jobs_done += 1
        return ANSWERED | LAST if frame.flags & _FLAG_LAST else ANSWERED

    def _stray(self, job_id: int) -> int:
        # Not the job this child was given (a copy its handler forked, say): drop it.
        self._log.warning("%s answered for job %d while running job %d: answer dropped",
                          self.describe(), job_id, self.job.id)
        return 0

    def _on_heartbeat(self, frame: wire.Frame, now: float, outcomes: list) -> None:
        job = self.job
        if job is None:
            return
        beat = wire.Heartbeat.decode(frame)
        if beat.job != job.id:
            return  # not a sign of life of this job
        self.beat_deadline = now + self._settings.heartbeat_timeout
        if beat.progress is not None:
            outcomes.append(JobProgress(job, beat.progress))

    def _broke(self, exc: Exception) -> int:
        self.broken = str(exc)
        self._log.error("%s sent a bad frame: %s", self.describe(), exc)
        self._close_read()
        return BROKEN

    # -- winding up ------------------------------------------------------------

    def close(self, now: float, outcomes: list, how: str) -> None:
        """The child was reaped (``how``: its exit in words): read what it left in the
        pipe, close both ends, kill whatever it left running in its group, and report
        its job in flight, if any, as failed."""
        self.state = DEAD
        self.drain(now, outcomes)
        self._close_read()
        if self.write_registered:
            self._sel.unregister(self.write_fd)
            self.write_registered = False
        self._os.close(self.write_fd)
        self.writer.clear()
        self._os.killpg(self.pid, signal.SIGKILL)
        job = self.job
        if job is not None:
            self.job = None
            outcomes.append(JobFailed(job, self.kill_kind or FAIL_CRASHED,
                                      self.kill_message or how, None, None, False,
                                      now - self.job_started))

    def _close_read(self) -> None:
        if not self.read_open:
            return
        self.read_open = False
        self._sel.unregister(self.read_fd)
        self._os.close(self.read_fd)

"""The pool's conversation with its children: reading their frames as the selector
reports them, acting on each answer, and writing to their pipes without ever blocking.

``PoolIO`` holds the state both halves of the pool share; ``supervisor.pool.pool.Pool``
builds the lifecycle policy (deadlines, kills, reaping, size) on top of it.
"""

from __future__ import annotations

import logging
import selectors
import signal
from collections import deque
from collections.abc import Callable

from shared import wire
from shared.jobs import FAIL_CRASHED, FAIL_ERROR, TERMINAL_FAILURES
from supervisor.pool.childproc import BOOTING, BUSY, IDLE, STOPPING, Child, CrashLoop, PoolSettings
from supervisor.pool.oscalls import OsCalls
from supervisor.pool.outcomes import ChildEvent, JobDone, JobFailed, JobProgress

EVENT_READ = selectors.EVENT_READ
EVENT_WRITE = selectors.EVENT_WRITE
READ_CHUNK = 1 << 16
STOP_FRAME = wire.encode(wire.STOP)
_DONE = wire.DONE
_FAILED = wire.FAILED
_HEARTBEAT = wire.HEARTBEAT
_ANSWERS = (_DONE, _FAILED)


class PoolIO:
    """Frames in and out of every child, and the state the pool keeps about them."""

    def __init__(self, settings: PoolSettings, selector: selectors.BaseSelector,
                 oscalls: OsCalls, clock: Callable[[], float],
                 log: logging.Logger) -> None:
        self.settings = settings
        self._sel = selector
        self._os = oscalls
        self._clock = clock
        self._log = log
        self._children: dict[int, Child] = {}  # by pid, until reaped
        self._by_fd: dict[int, Child] = {}
        self._idle: deque[Child] = deque()
        self._in_flight: dict[int, Child] = {}  # job id -> child, until answered or reaped
        self._outcomes: list = []
        self._crashes = CrashLoop(settings.crash_loop_limit, settings.crash_loop_window)
        self._stopping = False
        # A lower bound on the earliest deadline of any child: extending a deadline
        # leaves it early, which costs one idle look, never a missed deadline.
        self._due: float | None = None
        self._size_dirty = True  # a child left the active states: recount in tick

    def _arm(self, when: float | None) -> None:
        if when is not None and (self._due is None or when < self._due):
            self._due = when

    def _kill(self, child: Child, now: float, kind: str | None, message: str,
              sig: int = signal.SIGTERM, *, boot: bool = False) -> None:
        raise NotImplementedError  # the policy lives in Pool

    # -- events from the selector ----------------------------------------------

    def handle_event(self, key: selectors.SelectorKey, mask: int) -> None:
        """Read a child's frames or flush its queued writes."""
        child = self._by_fd.get(key.fd)
        if child is None:
            return
        if key.fd == child.read_fd:
            if mask & EVENT_READ:
                self._read(child)
        elif mask & EVENT_WRITE:
            self._flush(child)

    def _read(self, child: Child) -> bool:
        """One read from the child's pipe; False when nothing more will come."""
        try:
            data = self._os.read(child.read_fd, READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._close_read(child)
            return False
        try:
            frames = child.reader.feed(data)
        except wire.ProtocolError as exc:
            self._log.error("%s sent a bad frame: %s", child.describe(), exc)
            self._close_read(child)
            self._kill(child, self._clock(), FAIL_CRASHED,
                       f"child {child.pid} broke the wire protocol: {exc}", signal.SIGKILL)
            return False
        if frames:
            now = self._clock()
            for frame in frames:
                mtype = frame.type
                if mtype in _ANSWERS:
                    self._on_answer(child, frame, now)
                elif mtype == _HEARTBEAT:
                    self._on_heartbeat(child, frame, now)
                elif mtype == wire.READY:
                    self._on_ready(child)
                elif mtype == wire.BOOT_ERROR:
                    body = frame.json()
                    child.boot_error = f"{body.get('kind')} error: {body.get('message')}"
        return True

    def _on_answer(self, child: Child, frame: wire.Frame, now: float) -> None:
        job = child.job
        if job is None:
            self._log.warning("%s answered with no job in flight", child.describe())
            return
        duration = now - child.job_started
        if frame.type == _DONE:
            self._outcomes.append(JobDone(job, frame.body.decode(), duration))
        else:
            body = frame.json()
            kind = body.get("kind") or FAIL_ERROR
            self._outcomes.append(JobFailed(
                job, kind, body.get("message") or "", body.get("traceback"),
                body.get("retry_delay"), kind in TERMINAL_FAILURES, duration))
        del self._in_flight[job.id]
        child.job = None  # its deadlines are ignored from now on: deadline() is by state
        if child.kill_kind is not None:
            child.kill_kind = child.kill_message = None
        child.jobs_done += 1
        if child.state != BUSY:
            return  # being killed or already dead: the answer still counts
        if frame.flags & wire.FLAG_LAST:
            # The child exits right after this frame: never dispatch to it again.
            child.state = STOPPING
            child.expected_exit = True
            child.exit_deadline = now + self.settings.kill_grace
            self._arm(child.exit_deadline)
            self._size_dirty = True
            self._event(child, "stopping", "recycling: its job or memory limit was reached")
        elif child.retire_after_job or self._stopping:
            self._send_stop(child, now, "retiring after its job")
        elif child.max_jobs is not None and child.jobs_done >= child.max_jobs:
            self._send_stop(child, now, "job limit reached")
        else:
            child.state = IDLE
            self._idle.append(child)

    def _on_heartbeat(self, child: Child, frame: wire.Frame, now: float) -> None:
        job = child.job
        if job is None:
            return
        child.beat_deadline = now + self.settings.heartbeat_timeout
        if frame.body:
            body = frame.json()
            progress = body.get("progress")
            if progress is not None and body.get("job") == job.id:
                self._outcomes.append(JobProgress(job, progress))

    def _on_ready(self, child: Child) -> None:
        if child.ready:
            return
        child.ready = True
        child.boot_deadline = None
        self._crashes.ready()
        self._event(child, "ready", "")
        if child.state != BOOTING:
            return
        if self._stopping or child.retire_after_job:
            self._send_stop(child, self._clock(), "pool stopping" if self._stopping
                            else "recycling all")
            return
        child.state = IDLE
        self._idle.append(child)

    # -- writing ---------------------------------------------------------------

    def _send(self, child: Child, data: bytes) -> None:
        try:
            done = child.writer.send(data, child.write)
        except OSError:
            # The child is gone (EPIPE); reaping it reports its job.
            child.writer.clear()
            return
        if not done and not child.write_registered:
            self._sel.register(child.write_fd, EVENT_WRITE, self)
            child.write_registered = True

    def _flush(self, child: Child) -> None:
        try:
            done = child.writer.flush(child.write)
        except OSError:
            child.writer.clear()
            done = True
        if done and child.write_registered:
            self._sel.unregister(child.write_fd)
            child.write_registered = False

    def _send_stop(self, child: Child, now: float, why: str) -> None:
        if child.state == IDLE:
            self._idle.remove(child)
        was_booting = child.state == BOOTING
        child.state = STOPPING
        child.expected_exit = True
        grace = self.settings.kill_grace
        child.exit_deadline = now + (self.settings.boot_timeout + grace if was_booting
                                     else grace)
        self._arm(child.exit_deadline)
        self._size_dirty = True
        self._send(child, STOP_FRAME)
        self._event(child, "stopping", why)

    def _close_read(self, child: Child) -> None:
        if not child.read_open:
            return
        child.read_open = False
        self._sel.unregister(child.read_fd)
        self._by_fd.pop(child.read_fd, None)
        self._os.close(child.read_fd)

    def _event(self, child: Child, what: str, detail: str) -> None:
        self._outcomes.append(ChildEvent(child.pid, child.worker_no, what, detail))
        self._log.debug("%s %s %s", child.describe(), what, detail)


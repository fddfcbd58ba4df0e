"""What a child's frames mean to the parent: the reading half of ``ChildProcess``.

``read`` takes what one non-blocking read of the child's pipe returned and turns each
frame into the child's record and outcomes: READY ends its boot, START makes the head
of its queue the running job (its deadlines re-armed, a ``JobStarted`` reported),
SKIPPED gives back a job it was asked to (``recall``) and never ran, DONE and FAILED end
the head (any other job id is dropped: an answer belongs to the job at
the head of that child's queue, nobody else's), HEARTBEAT keeps the head alive and
carries its progress. Kept apart from ``process`` so that each module holds one concern.
"""

from __future__ import annotations

import logging
from collections import deque

from shared import wire
from shared.jobs import TERMINAL_FAILURES, ClaimedJob
from supervisor.pool.outcomes import JobDone, JobFailed, JobProgress, JobReturned, JobStarted
from supervisor.pool.settings import PoolSettings
from supervisor.pool.states import (
    ANSWERED,
    BROKEN,
    BUSY,
    CLOSED,
    GOT_DATA,
    LAST,
    NO_LIMIT,
    READIED,
    RETURNED,
    STARTED,
    STARTED_SKIPPED,
    STOPPING,
)

READ_CHUNK = 1 << 16

_DONE = wire.DONE
_FAILED = wire.FAILED
_HEARTBEAT = wire.HEARTBEAT
_START = wire.START
_SKIPPED = wire.SKIPPED
_ANSWERS = (_DONE, _FAILED)
_unpack_done = wire.Done.unpack
_decode_failed = wire.Failed.decode
_unpack_start = wire.Start.unpack
_FLAG_LAST = wire.FLAG_LAST


class ChildReading:
    """The frames of one child, read and made sense of (a base of ``ChildProcess``,
    whose state it updates)."""

    __slots__ = ()
    _log: logging.Logger
    _os: object
    _settings: PoolSettings
    jobs: deque[ClaimedJob]
    read_fd: int
    read_open: bool
    reader: wire.FrameReader

    def read(self, now: float, outcomes: list) -> int:
        """One read from the child's pipe. Outcomes for its jobs go into ``outcomes``;
        the return value says what else was seen (``GOT_DATA``, ``READIED``,
        ``STARTED``, ``STARTED_SKIPPED``, ``RETURNED``, ``ANSWERED``, ``LAST``,
        ``BROKEN``, ``CLOSED`` bits; 0: nothing there)."""
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
                if mtype == _START:
                    seen |= self._on_start(frame, now, outcomes)
                elif mtype in _ANSWERS:
                    seen |= self._on_answer(frame, now, outcomes)
                elif mtype == _HEARTBEAT:
                    self._on_heartbeat(frame, now, outcomes)
                elif mtype == _SKIPPED:
                    seen |= self._on_skipped(frame, now, outcomes)
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

    def _on_start(self, frame: wire.Frame, now: float, outcomes: list) -> int:
        job_id = _unpack_start(frame)
        if job_id in self.skipping:
            self.skipping.discard(job_id)
            self._log.warning("%s started job %d although told to skip it",
                              self.describe(), job_id)
            return STARTED_SKIPPED
        jobs = self.jobs
        if not jobs or self.started or jobs[0].id != job_id:
            self._log.warning("%s started job %d, not the next of its queue: ignored",
                              self.describe(), job_id)
            return 0
        # Asked back, but it took the job before it read the SKIP: the job runs here.
        self.recalling.pop(job_id, None)
        self.started = True
        job = jobs[0]
        self._arm_head(job, now)
        outcomes.append(JobStarted(job))
        if self.state == STOPPING:
            # It took the job before it read STOP: the job runs; stop after it.
            self.state = BUSY
            self.exit_deadline = None
            self.retire_after_job = True
        return STARTED

    def _on_skipped(self, frame: wire.Frame, now: float, outcomes: list) -> int:
        job_id = wire.Skipped.decode(frame).job
        why = self.recalling.pop(job_id, None)
        if why is None:  # a cancelled job, already forgotten (``skip``)
            self.skipping.discard(job_id)
            return 0
        jobs = self.jobs
        i = next((i for i, job in enumerate(jobs) if job.id == job_id), None)
        if i is None or (i == 0 and self.started):
            self._log.warning("%s gave back job %d, which it does not hold unstarted: "
                              "ignored", self.describe(), job_id)
            return 0
        job = jobs[i]
        del jobs[i]
        if i == 0 and jobs:
            self._arm_head(jobs[0], now)
        outcomes.append(JobReturned(job, f"given back: {why}", True, release=True))
        return RETURNED

    def _on_answer(self, frame: wire.Frame, now: float, outcomes: list) -> int:
        jobs = self.jobs
        if not jobs:
            self._log.warning("%s answered with no job in flight", self.describe())
            return 0
        job = jobs[0]
        duration = now - self.job_started
        if frame.type == _DONE:
            job_id, result = _unpack_done(frame)
            if job_id != job.id:
                return self._stray(job_id)
            if not self.started:  # an answer says it ran, START or not
                outcomes.append(JobStarted(job))
            outcomes.append(JobDone(job, result, duration))
        else:
            answer = _decode_failed(frame)
            if answer.job != job.id:
                return self._stray(answer.job)
            if not self.started:
                outcomes.append(JobStarted(job))
            kind = answer.kind
            outcomes.append(JobFailed(job, kind, answer.message, answer.traceback,
                                      answer.retry_delay, kind in TERMINAL_FAILURES,
                                      duration))
        jobs.popleft()
        self.started = False
        if self.kill_kind is not None:
            self.kill_kind = self.kill_message = None
        self.jobs_done += 1
        if jobs:
            self._arm_head(jobs[0], now)  # its START follows: the deadlines move then
        else:
            self.limit = NO_LIMIT
        return ANSWERED | LAST if frame.flags & _FLAG_LAST else ANSWERED

    def _stray(self, job_id: int) -> int:
        # Not the job at the head of its queue (a copy its handler forked, say): drop it.
        self._log.warning("%s answered for job %d while running job %d: answer dropped",
                          self.describe(), job_id, self.jobs[0].id)
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


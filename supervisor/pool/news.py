"""What a child's frames told the pool: the typed news, and the reading that makes it.

``hear`` turns the bytes one read of a child's pipe brought into news, in the order
the child said them: the job records of ``outcomes`` (``JobStarted``, ``JobDone``,
``JobFailed``, ``JobExpired``, ``JobProgress``, ``JobCheckpoint``, ``JobReturned``),
which the pool passes on to the engine as they are, and the news of the child itself
(``Readied``, ``Leaving``, ``CrossedSkip``, ``Broken``). Each frame is checked against
what the child holds (an answer for any job but its head is dropped, a START out of
order is ignored) and then moves the child through one of its own verbs
(``ChildProcess.booted``, ``took``, ``answered``, ``take_out``, ``broke``): the
meaning of a frame is here, the child's life in ``process``.

``Heard`` is what one read said of the child itself, gathered once so that the pool
decides the child's fate from its state after the whole read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from shared import wire
from shared.jobs import FAIL_ERROR, FAIL_EXPIRED, FAIL_MEMORY, FAIL_STOPPED, TERMINAL_FAILURES
from shared.usage import ran_at_least
from supervisor.pool.outcomes import (
    JobCheckpoint,
    JobDone,
    JobExpired,
    JobFailed,
    JobProgress,
    JobReturned,
    JobStarted,
)

if TYPE_CHECKING:
    from supervisor.pool.process import ChildProcess


@dataclass(frozen=True, slots=True)
class Readied:
    """Its first READY: it booted and may be given jobs."""


@dataclass(frozen=True, slots=True)
class Leaving:
    """The answer just before this one was its last: the child exits right after it
    (its job or memory limit was reached), so it must never be given another job."""


@dataclass(frozen=True, slots=True)
class CrossedSkip:
    """It started a job it had been told to skip (its START crossed the SKIP): the job
    was given back or to another child meanwhile, so this child must be killed."""

    job_id: int


@dataclass(frozen=True, slots=True)
class Broken:
    """A frame that cannot be trusted (``why``): its read end is closed; kill it."""

    why: str


ChildNews = JobStarted | JobDone | JobFailed | JobProgress | JobReturned | JobCheckpoint | \
    JobExpired | \
    Readied | Leaving | CrossedSkip | Broken

# The news that is a job's record (passed on to the engine), not the child's own.
JOB_RECORDS = (JobStarted, JobDone, JobFailed, JobProgress, JobReturned, JobCheckpoint,
               JobExpired)


class Heard:
    """What one read said of the child itself, beyond its job records: the pool acts
    on it once the whole read is gathered. A plain class whose fields default at class
    level, not a dataclass: one is made per read, on the per-job path, and an instance
    that sets only the fields a read changed skips a generated ``__init__`` of seven
    assignments."""

    started: bool = False  # a job of its queue started
    answered: bool = False  # its head answered (done, failed or expired)
    gave_back: bool = False  # it gave back a job it was asked for
    leaving: bool = False  # its last answer said it exits
    readied: bool = False  # it booted
    crossed: CrossedSkip | None = None  # it started a job it was told to skip
    broken: Broken | None = None  # a frame could not be trusted


_READIED = Readied()
_LEAVING = Leaving()

_START = wire.START
_DONE = wire.DONE
_FAILED = wire.FAILED
_ANSWERS = (_DONE, _FAILED)
_HEARTBEAT = wire.HEARTBEAT
_SKIPPED = wire.SKIPPED
_CHECKPOINT = wire.CHECKPOINT
_READY = wire.READY
_BOOT_ERROR = wire.BOOT_ERROR
_unpack_start = wire.Start.unpack
_unpack_done = wire.Done.unpack
_decode_failed = wire.Failed.decode
_FLAG_LAST = wire.FLAG_LAST


def hear(child: ChildProcess, data: bytes, now: float, news: list[ChildNews]) -> None:
    """Add to ``news`` what ``data``, bytes read from ``child``'s pipe, meant. READY
    ends its boot, START makes the head of its queue the running job, SKIPPED gives back
    a job it was asked for, DONE and FAILED end the head, HEARTBEAT keeps the head alive
    and carries its progress, CHECKPOINT carries the running job's state. A frame that
    cannot be trusted breaks the child: nothing after it is read."""
    try:
        for frame in child.reader.feed(data):
            mtype = frame.type
            if mtype == _START:
                _on_start(child, frame, now, news)
            elif mtype in _ANSWERS:
                _on_answer(child, frame, now, news)
            elif mtype == _HEARTBEAT:
                _on_heartbeat(child, frame, now, news)
            elif mtype == _SKIPPED:
                _on_skipped(child, frame, now, news)
            elif mtype == _CHECKPOINT:
                _on_checkpoint(child, frame, news)
            elif mtype == _READY:
                if not child.ready:
                    child.booted()
                    news.append(_READIED)
            elif mtype == _BOOT_ERROR:
                said = wire.BootError.decode(frame)
                child.boot_error = f"{said.kind} error: {said.message}"
    except wire.ProtocolError as exc:
        why = str(exc)
        child.broke(why)
        news.append(Broken(why))


def _on_start(child: ChildProcess, frame: wire.Frame, now: float,
              news: list[ChildNews]) -> None:
    job_id = _unpack_start(frame)
    if job_id in child.skipping:
        child.skipping.discard(job_id)
        child.log.warning("%s started job %d although told to skip it",
                          child.describe(), job_id)
        news.append(CrossedSkip(job_id))
        return
    jobs = child.jobs
    if not jobs or child.started or jobs[0].id != job_id:
        child.log.warning("%s started job %d, not the next of its queue: ignored",
                          child.describe(), job_id)
        return
    news.append(JobStarted(child.took(now)))


def _on_skipped(child: ChildProcess, frame: wire.Frame, now: float,
                news: list[ChildNews]) -> None:
    job_id = wire.Skipped.decode(frame).job
    recall = child.recalling.pop(job_id, None)
    if recall is None:  # a cancelled job, already forgotten (``skip``)
        child.skipping.discard(job_id)
        return
    at = child.queued_at(job_id)
    if at is None:
        child.log.warning("%s gave back job %d, which it does not hold unstarted: "
                          "ignored", child.describe(), job_id)
        return
    news.append(JobReturned(child.take_out(at, now), f"given back: {recall.why}", recall.to))


def _on_answer(child: ChildProcess, frame: wire.Frame, now: float,
               news: list[ChildNews]) -> None:
    jobs = child.jobs
    if not jobs:
        child.log.warning("%s answered with no job in flight", child.describe())
        return
    job = jobs[0]
    head = child.head
    started = head is not None and head.started
    duration = now - head.armed_at if head is not None else 0.0
    usage = child.killed_usage
    if frame.type == _DONE:
        done = _unpack_done(frame)
        if done.job != job.id:
            _stray(child, done.job)
            return
        if not started:  # an answer says it ran, START or not
            news.append(JobStarted(job))
        news.append(JobDone(job, done.result, ran_at_least(duration, done.usage),
                            usage.tree_peak(done.usage), done.output))
        usage.answered(done.usage)
    else:
        answer = _decode_failed(frame)
        if answer.job != job.id:
            _stray(child, answer.job)
            return
        kind = answer.kind
        if kind == FAIL_EXPIRED and not started:
            news.append(JobExpired(job))  # it never ran: no start to record
        else:
            if not started:
                news.append(JobStarted(job))
            message = answer.message
            if kind == FAIL_STOPPED:
                # Stopping let out: the notice's kind, or an ordinary error without one.
                notice = head.notice if head is not None else None
                kind = notice.kind if notice is not None else FAIL_ERROR
                if kind == FAIL_MEMORY and notice is not None:
                    # The memory cap's notice: its errors entry says why it was
                    # told, not only that it stopped.
                    message = f"{notice.message}; it stopped itself first"
            news.append(JobFailed(job, kind, message, answer.traceback,
                                  answer.retry_delay, kind in TERMINAL_FAILURES,
                                  ran_at_least(duration, answer.usage),
                                  usage.tree_peak(answer.usage), answer.output))
        usage.answered(answer.usage)
    child.answered(now)
    if frame.flags & _FLAG_LAST:
        news.append(_LEAVING)


def _stray(child: ChildProcess, job_id: int) -> None:
    # Not the job at the head of its queue (a copy its handler forked, say): drop it.
    child.log.warning("%s answered for job %d while running job %d: answer dropped",
                      child.describe(), job_id, child.jobs[0].id)


def _on_checkpoint(child: ChildProcess, frame: wire.Frame, news: list[ChildNews]) -> None:
    said = wire.Checkpoint.decode(frame)
    job = child.job
    if job is None or job.id != said.job or not child.started:
        # Not the running job's (a copy its handler forked): never stored; a handler
        # waiting on it is told so rather than left waiting.
        if said.flush:
            child.send(wire.Checkpointed(said.job, False).encode())
        return
    news.append(JobCheckpoint(job, said.state.decode(), said.flush))


def _on_heartbeat(child: ChildProcess, frame: wire.Frame, now: float,
                  news: list[ChildNews]) -> None:
    job = child.job
    if job is None:
        return
    beat = wire.Heartbeat.decode(frame)
    if beat.job != job.id:
        return  # not a sign of life of this job
    head = child.head
    if head is not None:
        head.beat(now)
    if beat.progress is not None:
        news.append(JobProgress(job, beat.progress))

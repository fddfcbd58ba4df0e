"""What the pool hands back to the parent loop, and the error that halts it.

The pool never touches the database: it reports what happened to each job as one of
these records, in order, through ``Pool.take_outcomes()``; the parent loop turns them
into batched writes. Child lifecycle events travel the same way, for logs and metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from shared.jobs import ClaimedJob
from shared.usage import Usage


@dataclass(slots=True)
class JobStarted:
    """A child took the job from its queue (its START): the attempt counts from now."""

    job: ClaimedJob


class ReturnTo(StrEnum):
    """Where a job that came back unstarted goes next (a draining parent releases
    every kept one)."""

    CHILD = "child"  # still ours: another child runs it
    DATABASE = "database"  # still ours, but back to the table (its queue was paused)
    NOWHERE = "nowhere"  # no longer ours (cancelled, lease lost): forget it


@dataclass(slots=True)
class JobReturned:
    """A job queued in a child never started there: its child died, was recycled or
    told to stop, or the job was skipped. Its attempt is unspent; ``to`` says where it
    goes next."""

    job: ClaimedJob
    why: str
    to: ReturnTo

    @property
    def keep(self) -> bool:
        """It is still ours to run (another child, or the table when draining)."""
        return self.to is not ReturnTo.NOWHERE

    @property
    def release(self) -> bool:
        """It goes back to the database, not to another child."""
        return self.to is ReturnTo.DATABASE


@dataclass(slots=True)
class JobExpired:
    """A job's expires_at passed while it was queued in a child: the child never
    started it (no START came) and it ends as 'expired', its attempt unspent."""

    job: ClaimedJob


@dataclass(slots=True)
class JobDone:
    """The handler returned. ``result_json`` is the result as JSON text, ready for the
    store; the parent never decodes it. ``usage``: what the attempt cost, as the child
    measured it; ``output``: the tail of what it printed (None: nothing)."""

    job: ClaimedJob
    result_json: str
    duration: float
    usage: Usage | None = None
    output: str | None = None


@dataclass(slots=True)
class JobFailed:
    """The attempt failed. ``kind`` is one of the ``shared.jobs.FAIL_*`` kinds: from the
    child (error, discard, retry, binding, unknown_kind, result) or from the parent
    (crashed, timeout, hung, cancelled, shutdown). ``terminal`` means retrying cannot
    help; ``retry_delay`` is the handler's own choice for a ``Retry``. ``usage`` as for
    ``JobDone``, or as the parent saw it when it ended the attempt or the child died
    (``supervisor.pool.killedusage``, a lower bound); ``output`` as for ``JobDone``
    (None when the parent ended the attempt)."""

    job: ClaimedJob
    kind: str
    message: str
    traceback: str | None
    retry_delay: float | None
    terminal: bool
    duration: float
    usage: Usage | None = None
    output: str | None = None


@dataclass(slots=True)
class JobProgress:
    """A running job reported progress (``{"done", "total"?, "message"?}``)."""

    job: ClaimedJob
    progress: dict[str, Any]


@dataclass(slots=True)
class JobCheckpoint:
    """A running job's handler stored a checkpoint: ``state_json`` as the JSON text it
    came in (never decoded here); ``flush``: the handler waits until it is written
    (``Pool.checkpoint_written`` tells it)."""

    job: ClaimedJob
    state_json: str
    flush: bool


class ChildEventKind(StrEnum):
    """What happened to a child (``ChildEvent.what``); its value is the word logs and
    metrics use."""

    SPAWNED = "spawned"  # forked
    READY = "ready"  # its first READY came
    NATIVE = "native"  # silent, but its CPU time moves: busy in native code
    RECALLED = "recalled"  # its head overran: the jobs behind it were asked back
    STOPPING = "stopping"  # told to stop (or its last answer said it leaves)
    KILLED = "killed"  # signalled by the parent
    EXITED = "exited"  # reaped
    RECYCLED = "recycled"  # reaped, having left on reaching its job or memory limit
    BOOT_FAILED = "boot_failed"  # reaped before it was ready, not asked to go


@dataclass(slots=True)
class ChildEvent:
    """Something happened to a child (``what``: spawned, ready, stopping, killed,
    exited, recycled, boot_failed, native, recalled). ``detail`` says why or how, in
    words."""

    pid: int
    worker_no: int
    what: ChildEventKind
    detail: str


@dataclass(frozen=True, slots=True)
class NativeJob:
    """A child busy in native code now: its heartbeats stopped but its CPU time moves
    (a handler holding the GIL in a C call), for ``seconds`` so far."""

    pid: int
    worker_no: int
    job_id: int
    kind: str
    seconds: float

    def as_info(self) -> dict[str, Any]:
        """As published in the supervisor's registry row (``info.native``)."""
        return {"pid": self.pid, "worker": self.worker_no, "job": self.job_id,
                "kind": self.kind, "seconds": round(self.seconds, 1)}


# What became of one job, as a child's frames or its exit said.
JobRecord = (JobStarted | JobReturned | JobDone | JobFailed | JobProgress | JobCheckpoint
             | JobExpired)

# Everything ``Pool.take_outcomes()`` hands back.
Outcome = JobRecord | ChildEvent


class PoolHalted(Exception):
    """Children keep dying before they are ready (a crash loop): the pool stopped
    forking. The message says what the last of them died of."""

"""Waiting for a job or a batch to finish: ``supervisor.wait`` and ``Batch.wait``.

The waiter LISTENs on ``supervisor_final`` and then marks the job ``watched``; the
trigger of schema 0006 notifies ``j<id>`` when a watched job becomes final and ``b<id>``
when a batch closes. Plain jobs are never watched, so their completions send nothing.
Every waiting thread of a process shares one LISTEN connection (``shared.listening``).

A lost connection is re-opened without the caller noticing, and each waiter then reads
its row again (a notification sent while nobody listened is lost); the state is also
read at least every ``FALLBACK_POLL`` seconds. So the only errors are the documented
ones: ``JobFailed``, ``JobNotFound``, ``TimeoutError`` (also when the database stays
away until the timeout), and ``DatabaseUnavailable`` when it cannot be reached at all
when the wait begins.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import psycopg

from shared import jobs, listening
from shared.batchstate import summary
from shared.db import DatabaseUnavailable
from shared.dsn import resolve_dsn
from shared.listening import CHANNEL, Unreachable

__all__ = ["CHANNEL", "FALLBACK_POLL", "JobFailed", "JobNotFound", "connect", "wait",
           "wait_batch"]

FALLBACK_POLL = 5.0  # seconds between reads when no notification comes
WATCH_RETRY = 0.1  # seconds before reading again a row we could not mark watched yet
FIRST_READ_WAIT = 5.0  # seconds the first read may wait for the shared connection


class JobFailed(Exception):
    """The waited-for job ended discarded, cancelled or expired; ``error`` is its last error."""

    def __init__(self, job_id: int, state: str, error: dict | None) -> None:
        self.job_id = job_id
        self.state = state
        self.error = error
        message = (error or {}).get("message") or "no error recorded"
        super().__init__(f"job {job_id} {state}: {message}")


class JobNotFound(LookupError):
    """No job with that id (never enqueued, or pruned after it finished)."""


def connect(dsn: str | None = None) -> psycopg.Connection:
    """An autocommit connection of its own, for one-off reads (``Batch.summary``)."""
    return psycopg.connect(resolve_dsn(dsn, announce=False), autocommit=True)


class Found(NamedTuple):
    """What one read of the waited-for row said."""

    done: bool  # final: ``value`` is the answer
    value: Any = None
    state: str = ""  # for the timeout's message
    soon: bool = False  # read again shortly: the row could not be marked watched yet


# Marking skips a row locked right now (a completion being written, a producer's open
# transaction): the shared connection must never wait on a row lock, since every waiter
# of the process uses it. The row is then read again after WATCH_RETRY.
_WATCH = """
UPDATE supervisor.jobs SET watched = true
WHERE id = (SELECT id FROM supervisor.jobs WHERE id = %s AND NOT watched
            FOR UPDATE SKIP LOCKED)
"""
_STATE = "SELECT state, result, errors, watched FROM supervisor.jobs WHERE id = %s"


def read_job(job_id: int, row: tuple | None) -> Found:
    """What a job's ``_STATE`` row says; ``JobNotFound`` without a row, ``JobFailed``
    (with its last error) when it ended discarded, cancelled or expired."""
    state, result = job_outcome(job_id, row and row[:3])
    if state == "completed":
        return Found(True, result, state)
    return Found(False, None, state, soon=not row[3])  # type: ignore[index]


class Marked:
    """On which connection the waited-for job was last seen marked watched: the mark is
    set once per connection, not at every read (it commits without waiting for the WAL
    flush, so a server crash may lose it; a new connection marks again)."""

    def __init__(self) -> None:
        self.generation: int | None = None

    def on(self, generation: int) -> bool:
        """Whether the job is known to be marked, read on connection ``generation``."""
        return self.generation == generation

    def read(self, job_id: int, row: tuple | None, generation: int) -> Found:
        """``read_job``, remembering a mark it shows."""
        found = read_job(job_id, row)
        self.generation = None if found.soon else generation
        return found


def job_outcome(job_id: int, row: tuple | None) -> tuple[str, Any]:
    """``(state, result)`` from a job's ``(state, result, errors)``; ``JobNotFound``
    without a row, ``JobFailed`` (with its last error) when discarded, cancelled or expired."""
    if row is None:
        raise JobNotFound(f"no job {job_id}")
    state, result, errors = row
    if state in jobs.FAILED_FINAL_STATES:
        raise JobFailed(job_id, state, errors[-1] if errors else None)
    return state, result


def wait(job_id: int, timeout: float | None = None, *, dsn: str | None = None) -> Any:
    """The result of job ``job_id`` once it completed. Raises ``JobFailed`` if it ends
    discarded, cancelled or expired, ``JobNotFound`` if there is no such job, ``TimeoutError``
    after ``timeout`` seconds (None: no limit)."""
    _check(job_id, timeout, "job id")

    marked = Marked()

    def check(conn: psycopg.Connection, generation: int) -> Found:
        if not marked.on(generation):
            conn.execute(_WATCH, (job_id,))
        return marked.read(job_id, conn.execute(_STATE, (job_id,)).fetchone(), generation)

    return _wait(dsn, f"j{job_id}", check, timeout, f"job {job_id}")


def wait_batch(batch_id: int, timeout: float | None = None, *,
               dsn: str | None = None) -> Any:
    """The summary of batch ``batch_id`` once every member is final and its callback
    enqueued. ``LookupError`` if there is no such batch, ``TimeoutError`` on timeout."""
    _check(batch_id, timeout, "batch id")

    def check(conn: psycopg.Connection, _generation: int) -> Found:
        return read_batch(batch_id, summary(conn, batch_id))

    return _wait(dsn, f"b{batch_id}", check, timeout, f"batch {batch_id}")


def read_batch(batch_id: int, found: Any) -> Found:
    """What a batch's summary says; ``LookupError`` if there is no such batch."""
    if found is None:
        raise LookupError(f"batch {batch_id} does not exist")
    return Found(found.finished, found, f"{found.pending} pending")


def _wait(dsn: str | None, key: str, check: Callable[[psycopg.Connection, int], Found],
          timeout: float | None, what: str) -> Any:
    deadline = None if timeout is None else time.monotonic() + timeout
    listener, waiter = listening.acquire(resolve_dsn(dsn, announce=False), key)
    try:
        pace = Pace(deadline)
        while True:
            if pace.due(waiter.heard, listener.generation):
                waiter.heard = False
                try:
                    generation, found = listener.run(check, pace.read_by())
                except Unreachable as exc:
                    pace.failed(exc, listener.generation)
                except TimeoutError:
                    pass  # the deadline, checked below
                else:
                    if found.done:
                        return found.value
                    pace.read(found, generation)
            pace.check_deadline(what)
            listener.listen(waiter, pace.until(), pace.seen)
    finally:
        listening.release(listener, waiter)


class Pace:
    """When a waiter reads its row again, and what it says when time is up: the policy
    ``wait`` and ``wait_async`` share."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.seen = -1  # the listener's generation at the last read (or failed try)
        self.next_read = 0.0
        self.state = ""  # the last state read, for the timeout's message
        self.trouble = ""  # why the database cannot be reached, while it cannot
        self.reached = False  # it had a connection once (read, or lost one mid-read)

    def due(self, heard: bool, generation: int) -> bool:
        """Whether to read the row now: notified, a new connection, or time for it."""
        return heard or generation != self.seen or time.monotonic() >= self.next_read

    def read(self, found: Found, generation: int) -> None:
        """The row was read on the connection of ``generation``."""
        self.reached = True
        self.seen = generation
        self.state = found.state
        self.trouble = ""
        self.next_read = time.monotonic() + (WATCH_RETRY if found.soon else FALLBACK_POLL)

    def failed(self, exc: Unreachable, generation: int) -> None:
        """The read failed for want of a connection. A database that cannot be reached
        when the wait begins is an error; one lost later is waited for."""
        if exc.connecting and not self.reached:
            raise DatabaseUnavailable(f"cannot wait: {exc}") from None
        self.reached = True
        self.seen = generation
        self.trouble = str(exc)
        self.next_read = exc.retry_at

    def read_by(self) -> float | None:
        """How long a read may wait for the shared connection: the deadline, except that
        the first read gets a few seconds more (``timeout=0`` still reads once, as a
        wait on a connection of its own used to)."""
        if self.deadline is None or self.reached:
            return self.deadline
        return max(self.deadline, time.monotonic() + FIRST_READ_WAIT)

    def until(self) -> float:
        """When to stop listening and look again."""
        if self.deadline is None:
            return self.next_read
        return min(self.next_read, self.deadline)

    def check_deadline(self, what: str) -> None:
        """``TimeoutError`` once the deadline has passed."""
        if self.deadline is None or time.monotonic() < self.deadline:
            return
        detail = f" ({self.state})" if self.state else ""
        if self.trouble:
            detail += f"; the database is unreachable: {self.trouble}"
        raise TimeoutError(f"timed out waiting for {what}{detail}")


def _check(value: Any, timeout: Any, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {value!r}")
    if timeout is not None and (not isinstance(timeout, int | float)
                                or isinstance(timeout, bool) or timeout < 0):
        raise ValueError(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")

"""Waiting for a job or a batch to finish: ``supervisor.wait`` and ``Batch.wait``.

The waiter LISTENs on ``supervisor_final`` and then marks the job ``watched``; the
trigger of schema 0006 notifies ``j<id>`` when a watched job becomes final and ``b<id>``
when a batch closes. Plain jobs are never watched, so their completions send nothing.
A notification can still be missed (a dropped connection), so the state is read again
at least every ``FALLBACK_POLL`` seconds.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from shared.batchstate import summary
from shared.dsn import resolve_dsn

CHANNEL = "supervisor_final"
FALLBACK_POLL = 5.0  # seconds between reads when no notification comes


class JobFailed(Exception):
    """The waited-for job ended discarded or cancelled; ``error`` is its last error."""

    def __init__(self, job_id: int, state: str, error: dict | None) -> None:
        self.job_id = job_id
        self.state = state
        self.error = error
        message = (error or {}).get("message") or "no error recorded"
        super().__init__(f"job {job_id} {state}: {message}")


class JobNotFound(LookupError):
    """No job with that id (never enqueued, or pruned after it finished)."""


def connect(dsn: str | None = None) -> psycopg.Connection:
    """An autocommit connection of its own (waiting must not hold a pooled one)."""
    return psycopg.connect(resolve_dsn(dsn, announce=False), autocommit=True)


_WATCH = """
UPDATE supervisor.jobs SET watched = true WHERE id = %s AND NOT watched
"""
_STATE = "SELECT state, result, errors FROM supervisor.jobs WHERE id = %s"


def wait(job_id: int, timeout: float | None = None, *, dsn: str | None = None) -> Any:
    """The result of job ``job_id`` once it completed. Raises ``JobFailed`` if it ends
    discarded or cancelled, ``JobNotFound`` if there is no such job, ``TimeoutError``
    after ``timeout`` seconds (None: no limit)."""
    _check(job_id, timeout, "job id")
    deadline = None if timeout is None else time.monotonic() + timeout
    with connect(dsn) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        # Watching takes the row lock, so a completion in flight is either seen by the
        # read below or notifies us after its commit.
        conn.execute(_WATCH, (job_id,))
        wanted = f"j{job_id}"
        while True:
            state, result = job_outcome(job_id, conn.execute(_STATE, (job_id,)).fetchone())
            if state == "completed":
                return result
            _await(conn, wanted, deadline, f"job {job_id} ({state})")


def job_outcome(job_id: int, row: tuple | None) -> tuple[str, Any]:
    """``(state, result)`` from a job's ``_STATE`` row; ``JobNotFound`` without a row,
    ``JobFailed`` (with its last error) when it ended discarded or cancelled."""
    if row is None:
        raise JobNotFound(f"no job {job_id}")
    state, result, errors = row
    if state in ("discarded", "cancelled"):
        raise JobFailed(job_id, state, errors[-1] if errors else None)
    return state, result


def wait_batch(batch_id: int, timeout: float | None = None, *,
               dsn: str | None = None) -> Any:
    """The summary of batch ``batch_id`` once every member is final and its callback
    enqueued. ``LookupError`` if there is no such batch, ``TimeoutError`` on timeout."""
    _check(batch_id, timeout, "batch id")
    deadline = None if timeout is None else time.monotonic() + timeout
    with connect(dsn) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        wanted = f"b{batch_id}"
        while True:
            found = summary(conn, batch_id)
            if found is None:
                raise LookupError(f"batch {batch_id} does not exist")
            if found.finished:
                return found
            _await(conn, wanted, deadline, f"batch {batch_id} ({found.pending} pending)")


def _await(conn: psycopg.Connection, wanted: str, deadline: float | None, what: str) -> None:
    """Return when ``wanted`` is notified or the fallback poll is due (then the caller
    reads the state again); ``TimeoutError`` once the deadline has passed."""
    left = FALLBACK_POLL
    if deadline is not None:
        left = min(left, deadline - time.monotonic())
        if left <= 0:
            raise TimeoutError(f"timed out waiting for {what}")
    end = time.monotonic() + left
    while (remaining := end - time.monotonic()) > 0:
        for note in conn.notifies(timeout=remaining, stop_after=1):
            if note.payload == wanted:
                return


def _check(value: Any, timeout: Any, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {value!r}")
    if timeout is not None and (not isinstance(timeout, int | float)
                                or isinstance(timeout, bool) or timeout < 0):
        raise ValueError(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")

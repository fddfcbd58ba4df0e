"""Operator actions on jobs: list, show, retry, cancel. No click here; refusals are
``AdminError`` with a one-line message.

Retry puts a discarded, cancelled or retryable job back to ``available`` now with a
full set of attempts (``attempt = 0``), keeping its errors history. Completed jobs are
not re-run: their side effects happened; enqueue a new job instead.

Cancel ends an unfinished job as ``cancelled``. For a running job the same transaction
sends ``NOTIFY supervisor_cancel, '<id>'``: the supervisor running it kills that
child's group, and its later write for the job is fenced off because the row is no
longer ``running``. If the notification is missed, the supervisor's next lease renewal
is fenced off instead and it kills the child then.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg
from psycopg import errors as pgerrors

from shared.archived import unarchive
from shared.defaults import CANCEL_CHANNEL
from shared.jobs import CANCELLED, DISCARDED, FAIL_CANCELLED, RETRYABLE, RUNNING, STATES
from supervisor.admin.refusals import AdminError
from supervisor.admin.status import native_job

RETRY_STATES = (DISCARDED, CANCELLED, RETRYABLE)
CANCEL_STATES = ("available", "scheduled", RETRYABLE, RUNNING)
BIGINT_MAX = 2**63 - 1

_LIST_COLUMNS = """id, kind, queue, state, attempt, max_attempts, priority, run_at,
    created_at, attempted_at, finished_at, unique_key,
    errors -> -1 ->> 'message' AS last_error, cardinality(depends_on) AS dependencies"""

_LIST = f"""
SELECT {_LIST_COLUMNS}
FROM supervisor.jobs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(state)s::text IS NULL OR state = %(state)s)
ORDER BY id DESC
LIMIT %(limit)s
"""

# checkpoint_bytes: the size of the last checkpoint (issue 28), shown with its time.
_SHOW = """SELECT *, octet_length(checkpoint::text) AS checkpoint_bytes
FROM supervisor.jobs WHERE id = %(id)s"""

_RESET = """state = 'available', attempt = 0, run_at = now(), finished_at = NULL,
    lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL, progress = NULL"""

_RETRY_ONE = f"""
UPDATE supervisor.jobs SET {_RESET}
WHERE id = %(id)s AND state = ANY(%(states)s::text[])
RETURNING id
"""

# One job per unique key at most, and none whose key another live job holds: the
# partial unique index would otherwise reject the whole statement. A retryable job
# holds its own key already, hence "o.id <> c.id".
_RETRY_MANY = f"""
WITH c AS (
    SELECT id, unique_key,
           row_number() OVER (PARTITION BY unique_key ORDER BY id DESC) AS nth
    FROM supervisor.jobs
    WHERE state = %(state)s
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(kind)s::text IS NULL OR kind = %(kind)s)
), done AS (
    UPDATE supervisor.jobs AS j SET {_RESET}
    FROM c
    WHERE j.id = c.id AND j.state = %(state)s
      AND (c.unique_key IS NULL OR (c.nth = 1 AND NOT EXISTS (
          SELECT 1 FROM supervisor.jobs o
          WHERE o.unique_key = c.unique_key AND o.id <> c.id
            AND o.state IN ('available', 'scheduled', 'running', 'retryable'))))
    RETURNING j.id
)
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM done)
"""

# Every job a bulk retry by state matches, archived or not: ``shared.archived`` holds
# the live ones against the move and brings the archived ones back (issue 40).
_MATCHES = """
SELECT id FROM supervisor.jobs
WHERE state = %(state)s
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
"""

_KEY_HOLDER = """
SELECT o.id, o.state, j.unique_key FROM supervisor.jobs j
JOIN supervisor.jobs o ON o.unique_key = j.unique_key AND o.id <> j.id
WHERE j.id = %(id)s AND o.state IN ('available', 'scheduled', 'running', 'retryable')
LIMIT 1
"""

_LOCK_ONE = "SELECT state, lease_owner FROM supervisor.jobs WHERE id = %(id)s FOR UPDATE"


def _lock_job(conn: psycopg.Connection, job_id: int) -> tuple[str, str | None] | None:
    """Lock job ``job_id``'s row; its state and lease owner, or None when there is none.
    A lock that waited for the leader's move of the job into its archive finds the row
    it waited for deleted (``READ COMMITTED`` skips it): a second look, with a new
    snapshot, finds it in the archive."""
    for _ in range(2):
        row = conn.execute(_LOCK_ONE, {"id": job_id}).fetchone()
        if row is not None:
            return row[0], row[1]
    return None

_CANCEL = f"""
UPDATE supervisor.jobs AS j
SET state = 'cancelled', finished_at = now(),
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'kind', '{FAIL_CANCELLED}', 'message', 'cancelled by operator',
        'traceback', NULL, 'at', now(), 'supervisor', j.lease_owner)),
    lease_owner = NULL, lease_expires_at = NULL
WHERE j.id = %(id)s
"""


class BulkRetry(NamedTuple):
    """What ``retry_jobs`` did: jobs made available, and jobs left alone because
    another live job holds their unique key."""

    retried: int
    skipped: int


def parse_job_id(text: str) -> int:
    """A job id typed by a person, or ``AdminError`` (usage) naming what is wrong."""
    value = text.strip()
    if not value.isdigit() or not 0 < int(value) <= BIGINT_MAX:
        raise AdminError(f"a job id is a positive integer; got {text!r}", usage=True)
    return int(value)


def check_state(state: str | None, allowed: tuple[str, ...] = STATES) -> str | None:
    """``state`` when it is one of ``allowed`` (or None), else ``AdminError`` (usage)."""
    if state is not None and state not in allowed:
        raise AdminError(f"unknown state {state!r}; expected one of {', '.join(allowed)}",
                         usage=True)
    return state


def list_jobs(conn: psycopg.Connection, *, queue: str | None = None, kind: str | None = None,
              state: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Jobs newest first (by id), filtered; each with its last error's message."""
    check_state(state)
    if limit < 1:
        raise AdminError(f"--limit must be at least 1; got {limit}", usage=True)
    cur = conn.execute(_LIST, {"queue": queue, "kind": kind, "state": state, "limit": limit})
    assert cur.description is not None  # a SELECT describes its columns
    names = [d.name for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur]


def get_job(conn: psycopg.Connection, job_id: int) -> dict[str, Any]:
    """Every column of job ``job_id`` (and ``native`` for a running job whose child is
    busy in native code); ``AdminError`` when there is none."""
    cur = conn.execute(_SHOW, {"id": job_id})
    row = cur.fetchone()
    if row is None:
        raise AdminError(f"no job with id {job_id}")
    assert cur.description is not None  # a SELECT describes its columns
    job = dict(zip([d.name for d in cur.description], row, strict=True))
    if job["state"] == "running":
        native = native_job(conn, job_id)
        if native is not None:
            job["native"] = native  # busy in native code at its supervisor's last beat
    return job


def retry_job(conn: psycopg.Connection, job_id: int) -> str:
    """Make one discarded, cancelled or retryable job available now with a full set of
    attempts. Returns the state it was in; ``AdminError`` when it is missing, in
    another state, or its unique key is held by another live job."""
    try:
        with conn.transaction():
            row = _lock_job(conn, job_id)
            if row is None:
                raise AdminError(f"no job with id {job_id}")
            if row[0] not in RETRY_STATES:
                raise AdminError(f"job {job_id} is {row[0]}; only discarded, cancelled or "
                                 "retryable jobs can be retried")
            unarchive(conn, [job_id])
            conn.execute(_RETRY_ONE, {"id": job_id, "states": list(RETRY_STATES)})
    except pgerrors.UniqueViolation:
        holder = conn.execute(_KEY_HOLDER, {"id": job_id}).fetchone()
        detail = (f"job {holder[0]} ({holder[1]}) holds its unique key {holder[2]!r}"
                  if holder else "another live job holds its unique key")
        raise AdminError(f"job {job_id} cannot be retried: {detail}") from None
    return row[0]


# Jobs cancelled because ``id`` ended without completing (cancel_dependent in 0009 records
# the reason as a 'dependency' error naming it). A retry of ``id`` does not bring them
# back: their edges were consumed when they were cancelled.
_CANCELLED_DEPENDENTS = """
SELECT id FROM supervisor.jobs
WHERE state = 'cancelled' AND %(id)s = ANY(depends_on)
  AND errors -> -1 ->> 'kind' = 'dependency'
ORDER BY id
"""


def cancelled_dependents(conn: psycopg.Connection, job_id: int) -> list[int]:
    """The jobs that were cancelled because ``job_id`` (a dependency of theirs) was
    discarded or cancelled; retrying ``job_id`` leaves them cancelled."""
    return [row[0] for row in conn.execute(_CANCELLED_DEPENDENTS, {"id": job_id})]


# Dependencies a held job still waits for whose row is gone (deleted by SQL): nothing
# will ever consume their edge, so the job waits for ever unless cancelled.
_MISSING_DEPENDENCIES = """
SELECT d.dependency_id FROM supervisor.job_dependencies d
WHERE d.dependent_id = %(id)s
  AND NOT EXISTS (SELECT 1 FROM supervisor.jobs j WHERE j.id = d.dependency_id)
ORDER BY 1
"""


def missing_dependencies(conn: psycopg.Connection, job_id: int) -> list[int]:
    """The dependencies ``job_id`` still waits for that no longer exist (deleted): it
    will never run unless cancelled."""
    return [row[0] for row in conn.execute(_MISSING_DEPENDENCIES, {"id": job_id})]


def retry_jobs(conn: psycopg.Connection, *, state: str, queue: str | None = None,
               kind: str | None = None) -> BulkRetry:
    """Retry every job in ``state`` (discarded, cancelled or retryable) matching the
    filters. Jobs whose unique key another live job holds are skipped."""
    check_state(state, RETRY_STATES)
    params = {"state": state, "queue": queue, "kind": kind}
    for _ in range(3):
        try:
            with conn.transaction():
                if state != RETRYABLE:  # finished: some archived, some about to be
                    unarchive(conn, [r[0] for r in conn.execute(_MATCHES, params)])
                row = conn.execute(_RETRY_MANY, params).fetchone()
            assert row is not None  # two counts, always one row
            matched, retried = row
        except pgerrors.UniqueViolation:
            continue  # a producer took one of the keys meanwhile: look again
        return BulkRetry(retried, matched - retried)
    raise AdminError("bulk retry kept colliding with new jobs' unique keys; try again")


def cancel_job(conn: psycopg.Connection, job_id: int) -> str:
    """Cancel an unfinished job; a running one's supervisor is told on the cancel
    channel in the same transaction. Returns the state the job was in."""
    with conn.transaction():
        row = _lock_job(conn, job_id)
        if row is None:
            raise AdminError(f"no job with id {job_id}")
        state = row[0]
        if state not in CANCEL_STATES:
            raise AdminError(f"job {job_id} is already {state}; only unfinished jobs can be "
                             "cancelled")
        conn.execute(_CANCEL, {"id": job_id})
        if state == RUNNING:
            conn.execute("SELECT pg_notify(%s, %s)", (CANCEL_CHANNEL, str(job_id)))
    return state

"""Bulk actions on the jobs matching a filter (state, queue, kind, created time range):
count them, then retry, cancel or delete at most as many as the operator confirmed,
in batches of ``BATCH`` jobs, each batch its own short transaction, so an action over a
million rows never holds long locks nor one huge transaction.

Which jobs each action touches, whatever the filter says:
- retry: discarded, cancelled and retryable jobs (as ``retry_job``); a job whose
  unique key another live job holds is skipped, and of several sharing a key only the
  newest is retried;
- cancel: unfinished jobs (as ``cancel_job``); the supervisors running them are told on
  the cancel channel in the batch's transaction;
- delete: finished jobs only (completed, discarded, cancelled), as maintenance prunes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from shared.archived import unarchive
from shared.defaults import CANCEL_CHANNEL
from shared.jobs import FINISHED_STATES, RUNNING
from supervisor.admin.jobs import _CANCEL, _RESET, CANCEL_STATES, RETRY_STATES
from supervisor.admin.refusals import AdminError

BATCH = 1000
CAP = 100_000  # jobs per request: a bigger clean-up is several confirmed requests
ACTIONS: dict[str, tuple[str, ...]] = {
    "retry": RETRY_STATES,
    "cancel": CANCEL_STATES,
    "delete": FINISHED_STATES,
}


class BulkFilter(NamedTuple):
    """The jobs a bulk action is about (None: any)."""

    state: str | None = None
    queue: str | None = None
    kind: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


class BulkResult(NamedTuple):
    """What a bulk action did: jobs it changed, and jobs it looked at but left alone
    (a unique key held by another live job, or changed by someone else meanwhile)."""

    action: str
    changed: int
    skipped: int


def check_action(action: str) -> tuple[str, ...]:
    """The states ``action`` applies to; ``AdminError`` (usage) for an unknown one."""
    if action not in ACTIONS:
        raise AdminError(f"unknown bulk action {action!r}; expected one of "
                         f"{', '.join(ACTIONS)}", usage=True)
    return ACTIONS[action]


def _where(action: str, flt: BulkFilter) -> sql.Composable:
    states = [s for s in check_action(action) if flt.state in (None, s)]
    parts: list[sql.Composable] = [sql.SQL("state = ANY({}::text[])").format(states)]
    for column in ("queue", "kind"):
        value = getattr(flt, column)
        if value is not None:
            parts.append(sql.SQL("{} = {}").format(sql.Identifier(column), value))
    if flt.created_after is not None:
        parts.append(sql.SQL("created_at >= {}").format(flt.created_after))
    if flt.created_before is not None:
        parts.append(sql.SQL("created_at < {}").format(flt.created_before))
    return sql.SQL(" AND ").join(parts)


def count(conn: psycopg.Connection, action: str, flt: BulkFilter) -> int:
    """How many jobs ``action`` would touch under ``flt``, counted up to ``CAP`` + 1
    (more than ``CAP`` means "more than one request can do")."""
    query = sql.SQL("SELECT count(*) FROM (SELECT 1 FROM supervisor.jobs WHERE {} "
                    "LIMIT {}) AS m").format(_where(action, flt), CAP + 1)
    row = conn.execute(query).fetchone()
    assert row is not None  # count(*) returns one row
    return row[0]


_RETRY_BATCH = sql.SQL("""
WITH c AS (
    SELECT DISTINCT ON (unique_key IS NULL, coalesce(unique_key, id::text)) id, unique_key
    FROM supervisor.jobs
    WHERE id = ANY(%(ids)s) AND state = ANY(%(states)s::text[])
    ORDER BY unique_key IS NULL, coalesce(unique_key, id::text), id DESC
)
UPDATE supervisor.jobs AS j SET {reset}
FROM c
WHERE j.id = c.id AND j.state = ANY(%(states)s::text[])
  AND (c.unique_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM supervisor.jobs o
      WHERE o.unique_key = c.unique_key AND o.id <> c.id
        AND o.state IN ('available', 'scheduled', 'running', 'retryable')))
RETURNING j.id
""").format(reset=sql.SQL(_RESET))

_CANCEL_BATCH = _CANCEL.replace("WHERE j.id = %(id)s",
                                "WHERE j.id = ANY(%(ids)s) AND j.state = ANY(%(states)s)")

_DELETE_BATCH = """
DELETE FROM supervisor.jobs WHERE id = ANY(%(ids)s) AND state = ANY(%(states)s::text[])
RETURNING id
"""


def run(conn: psycopg.Connection, action: str, flt: BulkFilter, at_most: int) -> BulkResult:
    """Do ``action`` on at most ``at_most`` (and ``CAP``) jobs matching ``flt``, oldest
    first, ``BATCH`` at a time. ``conn`` must be in autocommit mode."""
    states = list(check_action(action))
    at_most = min(at_most, CAP)
    if at_most < 1:
        raise AdminError("a bulk action needs the number of jobs confirmed (at least 1)",
                         usage=True)
    where = _where(action, flt)
    changed = seen = 0
    after = 0
    while seen < at_most:
        ids = [row[0] for row in conn.execute(sql.SQL(
            "SELECT id FROM supervisor.jobs WHERE {} AND id > {} ORDER BY id LIMIT {}"
        ).format(where, after, min(BATCH, at_most - seen)))]
        if not ids:
            break
        after, seen = ids[-1], seen + len(ids)
        with conn.transaction():
            changed += _one_batch(conn, action, ids, states)
    return BulkResult(action, changed, seen - changed)


def _one_batch(conn: psycopg.Connection, action: str, ids: list[int],
               states: list[str]) -> int:
    params: dict[str, Any] = {"ids": ids, "states": states}
    if action == "retry":
        unarchive(conn, ids)  # finished ones may be in an archive (shared.archived)
        return len(conn.execute(_RETRY_BATCH, params).fetchall())
    if action == "delete":
        deleted = {row[0] for row in conn.execute(_DELETE_BATCH, params)}
        missed = [job_id for job_id in ids if job_id not in deleted]
        if missed:
            # A job the leader's move took into its archive while this statement ran
            # is in neither table for it (READ COMMITTED: the hot table's row was gone
            # once its lock was granted, the archive's not in the snapshot); a second
            # statement sees it where it went.
            deleted.update(row[0] for row in conn.execute(
                _DELETE_BATCH, {"ids": missed, "states": states}))
        return len(deleted)
    running = [row[0] for row in conn.execute(
        "SELECT id FROM supervisor.jobs WHERE id = ANY(%(ids)s) AND state = %(running)s "
        "FOR UPDATE", {"ids": ids, "running": RUNNING})]
    done = conn.execute(_CANCEL_BATCH, params).rowcount
    if running:
        conn.execute("SELECT pg_notify(%s, id::text) FROM unnest(%s::bigint[]) AS id",
                     (CANCEL_CHANNEL, running))
    return done

"""Archived jobs made live again (issue 40).

Finished jobs move from the hot table into archive tables that inherit from
``supervisor.jobs`` (schema 0032, ``supervisor.db.archives``). A reader sees them
through ``supervisor.jobs`` as before, but an archive only holds its family's finished
states, so whatever turns a finished job live again (a retry of a discarded or
cancelled job, one at a time, in bulk or a batch's failed members) first brings its row
back into the hot table: the same row, the same id, in the caller's transaction.

The leader's move may commit between a caller's choice of jobs and its change: a job
still in the hot table when chosen is then in an archive when changed, and the change
(making it live there) fails on the archive's ``CHECK``, the whole retry with it. So
``unarchive`` first locks the chosen jobs still in the hot table: the move takes its
rows ``FOR UPDATE SKIP LOCKED`` and leaves them until the caller's transaction ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

HOLD_LIVE = ("SELECT id FROM ONLY supervisor.jobs WHERE id = ANY(%s::bigint[]) "
             "ORDER BY id FOR UPDATE")
UNARCHIVE = "SELECT supervisor.unarchive_jobs(%s::bigint[])"


def unarchive(conn: psycopg.Connection, ids: Sequence[int]) -> int:
    """Hold the jobs among ``ids`` that are in the hot table against the move, and move
    those in an archive back into it; how many moved. Call it inside the transaction
    that then changes them."""
    if not ids:
        return 0
    conn.execute(HOLD_LIVE, (list(ids),))
    # a job the move took meanwhile (its lock waited for, the row then gone) is found
    # by this next statement in its archive
    row = conn.execute(UNARCHIVE, (list(ids),)).fetchone()
    return int(row[0]) if row else 0

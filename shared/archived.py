"""Archived jobs made live again (issue 40).

Finished jobs move from the hot table into archive tables that inherit from
``supervisor.jobs`` (schema 0032, ``supervisor.db.archives``). A reader sees them
through ``supervisor.jobs`` as before, but an archive only holds its family's finished
states, so whatever turns a finished job live again (a retry of a discarded or
cancelled job, one at a time, in bulk or a batch's failed members) first brings its row
back into the hot table: the same row, the same id, in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

UNARCHIVE = "SELECT supervisor.unarchive_jobs(%s::bigint[])"


def unarchive(conn: psycopg.Connection, ids: Sequence[int]) -> int:
    """Move the jobs among ``ids`` that are in an archive back into the hot table;
    how many moved. Call it inside the transaction that then changes them."""
    if not ids:
        return 0
    row = conn.execute(UNARCHIVE, (list(ids),)).fetchone()
    return int(row[0]) if row else 0

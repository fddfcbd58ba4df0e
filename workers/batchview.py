"""``current_job().batch``: the batch a running job closes (its callback) or belongs to.

Read in the child on a connection of its own, opened when asked for: most jobs never
touch it, and the child otherwise holds no database connection. ``results()`` streams
the members with a server-side cursor, so a callback of a 100k-member batch reads them
in chunks instead of loading them whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import psycopg

from shared import batchstate
from shared.costs import batch_cost
from shared.dsn import resolve_dsn

_FIND = """
SELECT id FROM supervisor.batches WHERE callback_id = %(id)s
UNION ALL
SELECT batch_id FROM supervisor.jobs WHERE id = %(id)s AND batch_id IS NOT NULL
LIMIT 1
"""


def connect() -> psycopg.Connection:
    """A connection of the child's own, for what a handler reads of other jobs (its
    batch, its dependencies). The parent puts its DSN in SUPERVISOR_DSN before forking
    (supervisor/cli/run.py)."""
    return psycopg.connect(resolve_dsn(None, announce=False), autocommit=True)


class BatchView:
    """A batch seen from inside one of its jobs: ``id``, ``summary``, ``results()``,
    ``member(id)``."""

    def __init__(self, batch_id: int) -> None:
        self.id = batch_id

    def __repr__(self) -> str:
        return f"<batch {self.id}>"

    @property
    def summary(self) -> batchstate.BatchSummary:
        """Counts by final state, the total, the callback's id and what the members cost
        (``.cost``), read now."""
        with connect() as conn:
            found = batchstate.summary(conn, self.id)
            if found is None:
                raise LookupError(f"batch {self.id} does not exist")
            return replace(found, cost=batch_cost(conn, self.id))

    def member(self, job_id: int) -> batchstate.Member:
        """One member by id (``id``, ``state``, ``result``, ``errors``); ``KeyError``
        when the batch has no such member."""
        with connect() as conn:
            row = conn.execute("SELECT id, state, result, errors FROM supervisor.jobs "
                               "WHERE id = %s AND batch_id = %s", (job_id, self.id)).fetchone()
        if row is None:
            raise KeyError(f"batch {self.id} has no member {job_id}")
        return batchstate.Member(*row)

    def results(self) -> Iterator[batchstate.Member]:
        """Every member (``id``, ``state``, ``result``, ``errors``) in id order, streamed."""
        with connect() as conn:
            yield from batchstate.iter_results(conn, self.id)


def batch_of(job_id: int) -> BatchView | None:
    """The batch job ``job_id`` closes or belongs to, or None."""
    with connect() as conn:
        row = conn.execute(_FIND, {"id": job_id}).fetchone()
    return None if row is None else BatchView(row[0])

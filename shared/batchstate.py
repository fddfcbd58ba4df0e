"""Where a batch stands, read from the database: its summary and its members' results.

The waiting code (``shared.waiting``) and the producer's ``Batch`` handle
(``shared.batches``) both read through here, so neither imports the other's way back.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg

from shared.costs import CostRollup


@dataclass(frozen=True)
class BatchSummary:
    """Where a batch stands: member counts by final state, and its callback's id."""

    id: int
    total: int
    completed: int
    discarded: int
    cancelled: int
    callback_id: int | None
    finished: bool
    expired: int = 0  # members not started before their expires_at (issue 28)
    stopped: str | None = None  # 'cancelled' (an operator) or 'aborted' (the budget)
    reason: str | None = None  # why it was stopped
    paused: bool = False
    failures: int = 0  # failed attempts, counted when the batch has a failure budget
    called_on_failure: bool = False  # its error callback ran instead of `then` (0028)
    cost: CostRollup | None = None  # every attempt of its members (Batch.summary() reads it)

    @property
    def aborted(self) -> bool:
        """Stopped by its failure budget (``reason`` says which and how far)."""
        return self.stopped == "aborted"

    @property
    def pending(self) -> int:
        """Members not final yet."""
        return self.total - self.completed - self.discarded - self.cancelled - self.expired


class Member(NamedTuple):
    """One member of a batch as ``results()`` yields it."""

    id: int
    state: str
    result: Any
    errors: list


_SUMMARY = """
SELECT b.id, b.total,
       count(*) FILTER (WHERE j.state = 'completed'),
       count(*) FILTER (WHERE j.state = 'discarded'),
       count(*) FILTER (WHERE j.state = 'cancelled'),
       b.callback_id, b.finished_at IS NOT NULL,
       count(*) FILTER (WHERE j.state = 'expired'),
       b.stop_kind, b.stop_reason, b.paused_at IS NOT NULL, b.failures,
       b.called_on_failure
FROM supervisor.batches b LEFT JOIN supervisor.jobs j ON j.batch_id = b.id
WHERE b.id = %s
GROUP BY b.id
"""


def summary(conn: psycopg.Connection, batch_id: int) -> BatchSummary | None:
    """The summary of ``batch_id`` read on ``conn``, or None if there is no such batch."""
    row = conn.execute(_SUMMARY, (batch_id,)).fetchone()
    return None if row is None else BatchSummary(*row)


def iter_results(conn: psycopg.Connection, batch_id: int,
                 chunk: int = 2000) -> Iterator[Member]:
    """Every member of the batch in id order, streamed by a server-side cursor (a
    100k-member batch never sits in memory whole). ``conn`` must not be autocommit-only
    in use elsewhere: the cursor lives in a transaction of its own."""
    with conn.transaction(), conn.cursor(name=f"batch_results_{batch_id}") as cur:
        cur.itersize = chunk
        cur.execute("SELECT id, state, result, errors FROM supervisor.jobs "
                    "WHERE batch_id = %s ORDER BY batch_id, id", (batch_id,))
        for row in cur:
            yield Member(*row)

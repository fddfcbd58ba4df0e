"""The statements of global limits: reading a queue's limits, renewing this supervisor's
slice of them, giving slices back. Run on the work connection (blocking, a few hundred
microseconds, about once a second per limited queue); never on the claim path.

A renewal is one short transaction: a per-queue advisory lock (so two supervisors never
both count on the same free room), then, in a statement of its own (a fresh snapshot
that sees the previous holder's commit), the live leases, then this supervisor's row.
What the new slice is comes from the caller (``supervisor.engine.leases``): this module
only moves rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import psycopg

T = TypeVar("T")

READ_LIMITS = """
SELECT queue, max_running, max_rate, burst, per_key_max_running
FROM supervisor.queue_limits WHERE queue = ANY(%(queues)s::text[])
"""

_LOCK = ("SELECT pg_advisory_xact_lock(hashtext('supervisor.limit_leases'), "
         "hashtext(%(queue)s))")

# Expired leases are deleted on the way: they hold nothing any more (their owner died or
# lost the database for a whole lease), and the table stays one row per live supervisor.
_OTHERS = """
WITH gone AS (
    DELETE FROM supervisor.limit_leases
    WHERE queue = %(queue)s AND owner <> %(owner)s AND expires_at < now())
SELECT owner, slots, want_slots, rate, want_rate FROM supervisor.limit_leases
WHERE queue = %(queue)s AND owner <> %(owner)s AND expires_at >= now()
"""

_WRITE = """
INSERT INTO supervisor.limit_leases AS l
    (queue, owner, slots, want_slots, rate, want_rate, expires_at)
VALUES (%(queue)s, %(owner)s, %(slots)s, %(want_slots)s, %(rate)s, %(want_rate)s,
        now() + %(ttl)s * interval '1 second')
ON CONFLICT (queue, owner) DO UPDATE
SET slots = EXCLUDED.slots, want_slots = EXCLUDED.want_slots, rate = EXCLUDED.rate,
    want_rate = EXCLUDED.want_rate, expires_at = EXCLUDED.expires_at
"""

RETURN = """
DELETE FROM supervisor.limit_leases
WHERE owner = %(owner)s AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
"""


@dataclass(frozen=True, slots=True)
class StoredLimits:
    """A queue's row of ``supervisor.queue_limits`` (None: that limit is not set)."""

    max_running: int | None = None
    max_rate: float | None = None
    burst: int | None = None
    per_key_max_running: int | None = None


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """Another supervisor's live lease on a queue."""

    slots: int
    want_slots: int
    rate: float
    want_rate: float


@dataclass(frozen=True, slots=True)
class Slice:
    """What this supervisor writes for itself at a renewal."""

    slots: int
    want_slots: int
    rate: float
    want_rate: float


def read_limits(conn: psycopg.Connection, queues: Sequence[str],
                prepare: bool = True) -> dict[str, StoredLimits]:
    """The limits of those of ``queues`` that have any."""
    rows = conn.execute(READ_LIMITS, {"queues": list(queues)}, prepare=prepare)
    return {queue: StoredLimits(max_running, max_rate, burst, per_key)
            for queue, max_running, max_rate, burst, per_key in rows}


def renew_lease(conn: psycopg.Connection, queue: str, owner: str, ttl: float,
                decide: Callable[[dict[str, LeaseRow]], T],
                to_row: Callable[[T], Slice]) -> T:
    """Under the queue's lock: read the other live leases, let ``decide`` compute this
    supervisor's slice from them, store it (``to_row``) for ``ttl`` seconds, commit.
    Returns what ``decide`` returned."""
    with conn.transaction():
        conn.execute(_LOCK, {"queue": queue})
        others = {row[0]: LeaseRow(row[1], row[2], row[3], row[4])
                  for row in conn.execute(_OTHERS, {"queue": queue, "owner": owner})}
        decided = decide(others)
        mine = to_row(decided)
        conn.execute(_WRITE, {"queue": queue, "owner": owner, "slots": mine.slots,
                              "want_slots": mine.want_slots, "rate": mine.rate,
                              "want_rate": mine.want_rate, "ttl": ttl})
    return decided


def return_leases(conn: psycopg.Connection, owner: str,
                  queues: Sequence[str] | None = None) -> None:
    """Give back this supervisor's slices (of ``queues``, or all): the others may take
    them at their next renewal instead of waiting for the leases to expire."""
    conn.execute(RETURN, {"owner": owner, "queues": None if queues is None else list(queues)})

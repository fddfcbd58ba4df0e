"""``enqueued()``: the jobs waiting in the queue, for asserting what code enqueued."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import psycopg

from supervisor.testing.connection import checked_schema, connection

WAITING = ("available", "scheduled", "retryable")

_SELECT = """
SELECT id, kind, queue, args::text, state, priority, attempt, max_attempts, run_at,
       created_at, timeout, unique_key, concurrency_key, batch_id, depends_on
FROM supervisor.jobs
WHERE state = ANY(%(states)s::text[])
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
ORDER BY id
"""


@dataclass(frozen=True, slots=True)
class EnqueuedJob:
    """One row of ``supervisor.jobs`` as ``enqueued()`` finds it. ``max_attempts`` and
    ``timeout`` are None when the producer left them to the handler (resolved at claim);
    ``depends_on`` holds the ids the job waits for."""

    id: int
    kind: str
    queue: str
    args: dict[str, Any]
    state: str
    priority: int
    attempt: int
    max_attempts: int | None
    run_at: datetime
    created_at: datetime
    timeout: float | None
    unique_key: str | None
    concurrency_key: str | None
    batch_id: int | None
    depends_on: tuple[int, ...] | None


def enqueued(kind: Any = None, queue: str | None = None,
             args: Mapping[str, Any] | None = None, conn: psycopg.Connection | None = None,
             *, dsn: str | None = None,
             states: Iterable[str] = WAITING) -> list[EnqueuedJob]:
    """The jobs waiting to run (``available``, ``scheduled`` or ``retryable``; ``states``
    to see others), oldest first, filtered: ``kind`` (a name or a ``@job`` handle),
    ``queue``, and ``args`` by containment (``args @> ...``: every key given must be
    there with that value; the job may have more). ``conn``: look in this connection's
    view (its own uncommitted jobs included); else the environment's database."""
    kind_name = getattr(kind, "kind", kind)
    if kind_name is not None and not isinstance(kind_name, str):
        raise TypeError(f"kind must be a job kind's name or a @job handle, not {kind!r}")
    if args is not None and not isinstance(args, Mapping):
        raise TypeError(f"args must be a mapping (matched by containment), not {args!r}")
    params = {"states": list(states), "kind": kind_name, "queue": queue,
              "args": None if args is None else orjson.dumps(dict(args)).decode()}
    with connection(conn, dsn) as c:
        checked_schema(c)
        rows = c.execute(_SELECT, params).fetchall()
    return [EnqueuedJob(id=r[0], kind=r[1], queue=r[2], args=orjson.loads(r[3]), state=r[4],
                        priority=r[5], attempt=r[6], max_attempts=r[7], run_at=r[8],
                        created_at=r[9], timeout=r[10], unique_key=r[11],
                        concurrency_key=r[12], batch_id=r[13],
                        depends_on=None if r[14] is None else tuple(r[14]))
            for r in rows]

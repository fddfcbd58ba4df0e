"""Putting jobs into the queue: ``enqueue`` (one job) and ``enqueue_many`` (bulk, COPY).

Everything a caller passes is validated before the database is touched, so bad input is
a ``TypeError``/``ValueError`` naming the problem and nothing half-written. With
``conn=`` the rows go into the caller's own transaction (visible at their commit, gone
at their rollback; we never commit it): a psycopg ``Connection``, Django's connection or
a SQLAlchemy ``Connection``/``Session`` (see ``shared.producers.connections``). Without
it each call borrows an autocommit connection from this process's small pool
(``shared.producers.pool``): threads do not queue behind one another, and a forked child
never shares its parent's sockets.

The asyncio twins are ``shared.producers.aio.enqueue_async``/``enqueue_many_async``;
``shared.producers.oncommit.enqueue_on_commit`` waits for a Django commit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg

from shared import batches, jobs
from shared.db import SchemaMissing
from shared.dsn import dsn_source, resolve_dsn
from shared.producers import plans
from shared.producers.combine import combiner
from shared.producers.connections import drive, sync_connection
from shared.producers.plans import MAX_QUEUE_NAME, Plan, Row, as_plan, plan_many, plan_one
from shared.producers.pool import producer_pool

__all__ = ["MAX_QUEUE_NAME", "encode_args", "enqueue", "enqueue_many"]


def enqueue(
    kind: str,
    args: Mapping[str, Any] | None = None,
    *,
    queue: str = jobs.DEFAULT_QUEUE,
    priority: int = jobs.DEFAULT_PRIORITY,
    max_attempts: int | None = None,
    timeout: float | None = None,
    run_at: datetime | None = None,
    delay: float | None = None,
    unique_key: str | None = None,
    depends_on: Sequence[int] | None = None,
    conn: Any = None,
    dsn: str | None = None,
    concurrency_key: str | None = None,
) -> int:
    """Insert one job of ``kind`` with ``args`` (a JSON object) and return its id.

    ``run_at`` (timezone-aware) or ``delay`` (seconds) postpone it; ``unique_key`` makes
    this return the id of the live job (available, scheduled, running or retryable) with
    the same key instead of inserting another. ``conn`` inserts in the caller's
    transaction; ``dsn`` picks the database otherwise (see ``shared.dsn``).
    ``depends_on`` (job ids) holds the job back until every one of them completed, and
    cancels it if one ends discarded or cancelled (``shared.batches``).
    ``concurrency_key``: jobs sharing it run at most their queue's per-key limit at once
    (``supervisor queues limit QUEUE --per-key-max-running K``).
    """
    if depends_on is not None:
        _no_key_with("depends_on", concurrency_key)
        plan = batches.plan_dependent(kind, args, depends_on, queue=queue, priority=priority,
                                      max_attempts=max_attempts, timeout=timeout,
                                      run_at=run_at, delay=delay, unique_key=unique_key)
        with _dsn_named(dsn):
            return run_plan(plan, conn, dsn, atomic=True)
    plan = plan_one(kind, args, queue=queue, priority=priority, max_attempts=max_attempts,
                    timeout=timeout, run_at=run_at, delay=delay, unique_key=unique_key,
                    concurrency_key=concurrency_key)
    if conn is not None:
        return run_plan(as_plan(plan), conn, dsn, atomic=False)
    with _dsn_named(dsn):
        if type(plan) is Row:
            return combiner(resolve_dsn(dsn)).insert(plan)
        return run_plan(as_plan(plan), conn, dsn, atomic=False)


def enqueue_many(
    kind: str,
    args_list: Sequence[Mapping[str, Any] | None],
    *,
    queue: str = jobs.DEFAULT_QUEUE,
    priority: int = jobs.DEFAULT_PRIORITY,
    max_attempts: int | None = None,
    timeout: float | None = None,
    run_at: datetime | None = None,
    delay: float | None = None,
    unique_key: str | None = None,
    unique_keys: Sequence[str | None] | None = None,
    then: batches.Callback | None = None,
    conn: Any = None,
    dsn: str | None = None,
    concurrency_key: str | None = None,
    concurrency_keys: Sequence[str | None] | None = None,
) -> Any:
    """Insert one job of ``kind`` per element of ``args_list``; returns ids in order.

    Uses COPY (fast) unless ``unique_keys`` is given: a key per job (None for no key),
    deduplicated like ``enqueue`` (duplicates within the batch share one job). A single
    ``unique_key`` is only accepted for a one-job batch. Options as for ``enqueue``. The
    batch is stored whole or not at all.

    With ``then`` (a handle's ``bind(...)``) the jobs form a batch: this returns a
    ``Batch`` (``id``, ``ids``, ``wait()``) and the callback is enqueued once, when the
    last of them is final.

    ``concurrency_key`` gives every job that key, ``concurrency_keys`` one per job (None:
    no key); the rows still travel by COPY.
    """
    if then is not None:
        _no_key_with("then", concurrency_key if concurrency_keys is None else concurrency_keys)
        plan = batches.plan_batch(kind, args_list, then, queue=queue, priority=priority,
                                  max_attempts=max_attempts, timeout=timeout, run_at=run_at,
                                  delay=delay, unique_keys=unique_keys or unique_key)
        with _dsn_named(dsn):
            batch_id, ids = run_plan(plan, conn, dsn, atomic=True)
        return batches.Batch(batch_id, ids, dsn)
    plan = plan_many(kind, args_list, queue=queue, priority=priority,
                     max_attempts=max_attempts, timeout=timeout, run_at=run_at, delay=delay,
                     unique_key=unique_key, unique_keys=unique_keys,
                     concurrency_key=concurrency_key, concurrency_keys=concurrency_keys)
    if plan is None:
        if conn is not None:
            sync_connection(conn)  # a bad conn is refused even for an empty batch
        return []
    if conn is not None:
        return run_plan(plan, conn, dsn, atomic=True)
    with _dsn_named(dsn):
        return run_plan(plan, conn, dsn, atomic=True)


def _no_key_with(option: str, keys: object) -> None:
    if keys is not None:
        raise ValueError(f"concurrency keys cannot be combined with {option} yet")


def encode_args(kind: str, args: Mapping[str, Any] | None) -> str:
    """``args`` as JSON object text, or a ``TypeError``/``ValueError`` that says why not."""
    return plans.encode_args(kind, args).decode()


@contextmanager
def _dsn_named(dsn: str | None) -> Iterator[None]:
    """A missing schema in the database we chose names where its DSN came from (an
    unrelated DATABASE_URL must not send jobs to another application's database)."""
    try:
        yield
    except SchemaMissing as exc:
        raise SchemaMissing(f"{exc} (DSN from {dsn_source(dsn)})") from None


def run_plan(plan: Plan, conn: Any, dsn: str | None, *, atomic: bool) -> Any:
    """Run ``plan`` on the caller's connection, or on one from this process's pool.
    ``atomic`` plans (several statements) get a transaction of their own when the
    connection would otherwise commit each statement."""
    if conn is not None:
        raw = sync_connection(conn)
        with psycopg.Cursor(raw) as cur:
            return drive(cur, plan, atomic=atomic and raw.autocommit)
    pool = producer_pool(resolve_dsn(dsn))
    cur = pool.take()
    try:
        return drive(cur, plan, atomic=atomic)
    finally:
        pool.give_back(cur)

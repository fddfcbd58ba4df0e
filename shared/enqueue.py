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
``shared.oncommit.enqueue_on_commit`` waits for a Django commit. Every form takes the
options of ``shared.options``, declared there once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Unpack

import psycopg

from shared import batches
from shared.db import SchemaMissing
from shared.dsn import dsn_source, resolve_dsn
from shared.options import ENQUEUE_OPTIONS, MANY_OPTIONS, EnqueueOptions, ManyOptions, check_names
from shared.producers import held, plans
from shared.producers.combine import combiner
from shared.producers.connections import drive, sync_connection
from shared.producers.plans import MAX_QUEUE_NAME, Plan, Row, as_plan, plan_many, plan_one
from shared.producers.pool import producer_pool

__all__ = ["MAX_QUEUE_NAME", "encode_args", "enqueue", "enqueue_many"]


def enqueue(kind: str, args: Mapping[str, Any] | None = None,
            **options: Unpack[EnqueueOptions]) -> int:
    """Insert one job of ``kind`` with ``args`` (a JSON object) and return its id.

    ``options`` (``shared.options.EnqueueOptions``): ``queue``, ``priority`` (lower runs
    first), ``max_attempts`` and ``timeout`` (None: the handler's). ``run_at``
    (timezone-aware) or ``delay`` (seconds) postpone it; ``unique_key`` makes this return
    the id of the live job (available, scheduled, running or retryable) with the same key
    instead of inserting another. ``conn`` inserts in the caller's transaction; ``dsn``
    picks the database otherwise (see ``shared.dsn``).
    ``depends_on`` (job ids, ``Dep``s, or names -> ids) holds the job back until every
    one of them completed, and cancels it if one ends discarded, cancelled or expired,
    unless its edge says ``Dep(id, allow_failure=True)`` (``shared.dependencies``); an id
    naming no job is a ``ValueError`` and nothing is written.
    ``concurrency_key``: jobs sharing it run at most their queue's per-key limit at once
    (``supervisor queues limit QUEUE --per-key-max-running K``).
    """
    check_names(options, ENQUEUE_OPTIONS, "enqueue")
    conn, dsn = options.get("conn"), options.get("dsn")
    plan: Row | Plan
    if options.get("depends_on") is not None:
        plans.no_concurrency_key_with("depends_on", options.get("concurrency_key"))
        plan = held.plan_dependent(kind, args, options)
        with _dsn_named(dsn):
            return run_plan(plan, conn, dsn, atomic=True)
    plan = plan_one(kind, args, options)
    if conn is not None:
        return run_plan(as_plan(plan), conn, dsn, atomic=False)
    with _dsn_named(dsn):
        if type(plan) is Row:
            return combiner(resolve_dsn(dsn)).insert(plan)
        return run_plan(as_plan(plan), conn, dsn, atomic=False)


def enqueue_many(kind: str, args_list: Sequence[Mapping[str, Any] | None], *,
                 then: batches.Callback | None = None,
                 on_failure: batches.Callback | None = None,
                 max_failures: int | None = None, max_failure_rate: float | None = None,
                 **options: Unpack[ManyOptions]) -> Any:
    """Insert one job of ``kind`` per element of ``args_list``; returns ids in order.

    Uses COPY (fast) unless ``unique_keys`` is given: a key per job (None for no key),
    deduplicated like ``enqueue`` (duplicates within the batch share one job). A single
    ``unique_key`` is only accepted for a one-job batch. Options as for ``enqueue``. The
    batch is stored whole or not at all.

    With ``then`` (a handle's ``bind(...)``) the jobs form a batch: this returns a
    ``Batch`` (``id``, ``ids``, ``wait()``) and the callback is enqueued once, when the
    last of them is final. ``on_failure`` (also a ``bind(...)``) makes it a batch too:
    it is enqueued instead of ``then`` when a member did not complete or the batch was
    stopped. ``max_failures`` / ``max_failure_rate`` (with a callback): a failure budget
    past which the batch is aborted (docs/batches.md).

    ``depends_on``: every job waits for those jobs, as with ``enqueue``.

    ``concurrency_key`` gives every job that key, ``concurrency_keys`` one per job (None:
    no key); the rows still travel by COPY.
    """
    check_names(options, MANY_OPTIONS, "enqueue_many")
    conn, dsn = options.get("conn"), options.get("dsn")
    plan: Plan | None
    keys = options.get("concurrency_keys")
    keys = options.get("concurrency_key") if keys is None else keys
    if then is None and on_failure is None and (max_failures is not None
                                                or max_failure_rate is not None):
        raise ValueError("a failure budget needs a batch: pass then=callback.bind(...)")
    if then is not None or on_failure is not None:
        plans.no_concurrency_key_with("then", keys)
        plan = batches.plan_batch(kind, args_list, then, options,
                                  (max_failures, max_failure_rate), on_failure)
        with _dsn_named(dsn):
            batch_id, ids = run_plan(plan, conn, dsn, atomic=True)
        return batches.Batch(batch_id, ids, dsn)
    if options.get("depends_on") is not None:
        plans.no_concurrency_key_with("depends_on", keys)
        plan = held.plan_many_dependents(kind, args_list, options)
    else:
        plan = plan_many(kind, args_list, options)
    if plan is None:
        if conn is not None:
            sync_connection(conn)  # a bad conn is refused even for an empty batch
        return []
    if conn is not None:
        return run_plan(plan, conn, dsn, atomic=True)
    with _dsn_named(dsn):
        return run_plan(plan, conn, dsn, atomic=True)


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

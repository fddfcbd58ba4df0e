"""asyncio producers: ``enqueue_async`` and ``enqueue_many_async``.

The same checks, statements and errors as ``shared.enqueue`` (the plans are shared), run
on psycopg ``AsyncConnection``s: nothing blocks the event loop and no thread is started.
``conn=`` joins the caller's transaction: a psycopg ``AsyncConnection`` or a SQLAlchemy
``AsyncConnection``/``AsyncSession`` on the psycopg driver. Without it, a call borrows an
autocommit connection from a small pool kept per event loop and process
(``shared.producers.aio_pool``).

``supervisor.wait_async(job_id, timeout)`` belongs here once waiting exists (issue 12).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from shared import jobs
from shared.dsn import resolve_dsn
from shared.producers.aio_combine import AsyncCombiner
from shared.producers.aio_pool import async_producer_pool
from shared.producers.connections import async_connection
from shared.producers.drive import lost_connection, missing_schema
from shared.producers.plans import Copy, Plan, Row, as_plan, plan_many, plan_one

__all__ = ["enqueue_async", "enqueue_many_async"]


async def enqueue_async(
    kind: str,
    args: Mapping[str, Any] | None = None,
    *,
    queue: str = jobs.DEFAULT_QUEUE,
    priority: int = jobs.DEFAULT_PRIORITY,
    max_attempts: int = jobs.DEFAULT_MAX_ATTEMPTS,
    timeout: float | None = None,
    run_at: datetime | None = None,
    delay: float | None = None,
    unique_key: str | None = None,
    conn: Any = None,
    dsn: str | None = None,
) -> int:
    """``shared.enqueue.enqueue`` for asyncio: insert one job, return its id."""
    plan = plan_one(kind, args, queue=queue, priority=priority, max_attempts=max_attempts,
                    timeout=timeout, run_at=run_at, delay=delay, unique_key=unique_key)
    if conn is None and type(plan) is Row:
        pool = async_producer_pool(resolve_dsn(dsn))
        if pool.combiner is None:
            pool.combiner = AsyncCombiner(pool, _drive_once)
        return await pool.combiner.insert(plan)
    return await run_plan_async(as_plan(plan), conn, dsn, atomic=False)


async def enqueue_many_async(
    kind: str,
    args_list: Sequence[Mapping[str, Any] | None],
    *,
    queue: str = jobs.DEFAULT_QUEUE,
    priority: int = jobs.DEFAULT_PRIORITY,
    max_attempts: int = jobs.DEFAULT_MAX_ATTEMPTS,
    timeout: float | None = None,
    run_at: datetime | None = None,
    delay: float | None = None,
    unique_key: str | None = None,
    unique_keys: Sequence[str | None] | None = None,
    conn: Any = None,
    dsn: str | None = None,
) -> list[int]:
    """``shared.enqueue.enqueue_many`` for asyncio: insert a batch (COPY), return ids."""
    plan = plan_many(kind, args_list, queue=queue, priority=priority,
                     max_attempts=max_attempts, timeout=timeout, run_at=run_at, delay=delay,
                     unique_key=unique_key, unique_keys=unique_keys)
    if plan is None:
        if conn is not None:
            await async_connection(conn)  # a bad conn is refused even for an empty batch
        return []
    return await run_plan_async(plan, conn, dsn, atomic=True)


async def run_plan_async(plan: Plan, conn: Any, dsn: str | None, *, atomic: bool) -> Any:
    """Run ``plan`` on the caller's async connection, or on one from the loop's pool."""
    if conn is not None:
        raw = await async_connection(conn)
        async with psycopg.AsyncCursor(raw) as cur:
            return await _drive(cur, plan, atomic=atomic and raw.autocommit)
    async with async_producer_pool(resolve_dsn(dsn)).cursor() as cur:
        return await _drive(cur, plan, atomic=atomic)


async def _drive_once(cur: psycopg.AsyncCursor, plan: Plan) -> Any:
    return await _drive(cur, plan, atomic=False)


async def _drive(cur: psycopg.AsyncCursor, plan: Plan, *, atomic: bool) -> Any:
    raw = cur.connection
    try:
        if atomic:
            async with raw.transaction():
                return await _steps(cur, plan)
        return await _steps(cur, plan)
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName) as exc:
        raise missing_schema(exc) from exc
    except psycopg.OperationalError as exc:
        if raw.closed or raw.broken:
            raise lost_connection(raw, exc) from None
        raise


async def _steps(cur: psycopg.AsyncCursor, plan: Plan) -> Any:
    reply = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            return done.value
        if type(step) is Copy:
            utf8 = cur.connection.info.encoding == "utf-8"
            async with cur.copy(step.statement) as copy:
                for chunk in step.chunks:
                    await copy.write(chunk if utf8 else chunk.decode())
            reply = None
        else:
            await cur.execute(step.query, step.params)
            reply = await cur.fetchall()

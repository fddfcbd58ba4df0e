"""asyncio producers: ``enqueue_async`` and ``enqueue_many_async``.

The same checks, statements and errors as ``shared.enqueue`` (the plans are shared), run
on psycopg ``AsyncConnection``s: nothing blocks the event loop and no thread is started.
``conn=`` joins the caller's transaction: a psycopg ``AsyncConnection`` or a SQLAlchemy
``AsyncConnection``/``AsyncSession`` on the psycopg driver. Without it, a call borrows an
autocommit connection from a small pool kept per event loop and process
(``shared.producers.aio_pool``).

Tasks that enqueue a ``Row`` at the same time share one statement and one commit
(``AsyncCombiner``: ``shared.producers.combine`` on an event loop), with at most
``MAX_LEADERS`` statements in flight per loop and database. The leader's send is
shielded: a leader cancelled while its batch is on the wire (a request timeout) does not
fail the other callers in that batch; they get their ids when it completes.

``supervisor.wait_async(job_id, timeout)`` belongs here once waiting exists (issue 12).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import psycopg
from psycopg import errors as pg_errors

from shared.db import DatabaseUnavailable
from shared.dsn import resolve_dsn
from shared.options import CALL_OPTIONS, MANY_OPTIONS, CallOptions, ManyOptions, check_names
from shared.producers.aio_pool import async_producer_pool
from shared.producers.combine import MAX_LEADERS, Pending
from shared.producers.connections import async_connection, lost_connection, missing_schema
from shared.producers.held import plan_dependent, plan_many_dependents
from shared.producers.plans import (
    INSERT_NOW,
    Copy,
    Plan,
    Row,
    as_plan,
    insert_rows,
    no_concurrency_key_with,
    plan_many,
    plan_one,
)

__all__ = ["enqueue_async", "enqueue_many_async"]


async def enqueue_async(kind: str, args: Mapping[str, Any] | None = None,
                        **options: Unpack[CallOptions]) -> int:
    """``shared.enqueue.enqueue`` for asyncio: insert one job, return its id. Options:
    ``shared.options.CallOptions`` (all of ``enqueue``'s, ``depends_on`` included)."""
    check_names(options, CALL_OPTIONS, "enqueue_async")
    conn, dsn = options.get("conn"), options.get("dsn")
    if options.get("depends_on") is not None:
        no_concurrency_key_with("depends_on", options.get("concurrency_key"))
        return await run_plan_async(plan_dependent(kind, args, options), conn, dsn,
                                    atomic=True)
    plan = plan_one(kind, args, options)
    if conn is None and type(plan) is Row:
        pool = async_producer_pool(resolve_dsn(dsn))
        if pool.combiner is None:
            pool.combiner = AsyncCombiner(pool, _drive_once)
        return await pool.combiner.insert(plan)
    return await run_plan_async(as_plan(plan), conn, dsn, atomic=False)


async def enqueue_many_async(kind: str, args_list: Sequence[Mapping[str, Any] | None],
                             **options: Unpack[ManyOptions]) -> list[int]:
    """``shared.enqueue.enqueue_many`` for asyncio: insert many jobs (COPY), return their
    ids. Options: ``shared.options.ManyOptions``, ``depends_on`` included (no ``then``:
    a batch's handle, its wait and its actions, are blocking calls)."""
    check_names(options, MANY_OPTIONS, "enqueue_many_async")
    conn, dsn = options.get("conn"), options.get("dsn")
    keys = options.get("concurrency_keys")
    keys = options.get("concurrency_key") if keys is None else keys
    plan: Plan | None
    if options.get("depends_on") is not None:
        no_concurrency_key_with("depends_on", keys)
        plan = plan_many_dependents(kind, args_list, options)
    else:
        plan = plan_many(kind, args_list, options)
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


class AsyncCombiner:
    """Batches the Rows of concurrent tasks into shared statements on one loop's pool."""

    def __init__(self, pool: Any, run_plan: Any, max_leaders: int = MAX_LEADERS) -> None:
        self.pool = pool  # an AsyncProducerPool
        self.run_plan = run_plan  # drives a plan on an AsyncCursor (shared.producers.aio)
        self.max_leaders = max_leaders
        self.batches = 0
        self._changed = asyncio.Condition()
        self._waiting: list[Pending] = []
        self._leaders = 0

    async def insert(self, row: Row) -> int:
        """Store ``row`` (committed when this returns) and return its job id."""
        job = Pending(row)
        self._waiting.append(job)
        if job.taken or self._leaders >= self.max_leaders:
            async with self._changed:
                try:
                    await self._changed.wait_for(lambda: job.done or (
                        not job.taken and self._leaders < self.max_leaders))
                except BaseException:
                    if not job.taken:  # cancelled before any leader took it: never sent
                        self._waiting.remove(job)
                    raise
        if not job.done:
            self._leaders += 1
            batch, self._waiting = self._waiting, []
            for member in batch:
                member.taken = True
            await asyncio.shield(asyncio.ensure_future(self._lead(batch, job)))
        if job.error is not None:
            raise job.error
        return job.id

    async def _lead(self, batch: list[Pending], own: Pending) -> None:
        try:
            await self._send(batch, own)
        finally:
            self._leaders -= 1
            async with self._changed:
                self._changed.notify_all()

    async def _send(self, batch: list[Pending], own: Pending) -> None:
        try:
            ids = await self._run([job.row for job in batch])
        except DatabaseUnavailable as exc:
            for job in batch:
                job.error = DatabaseUnavailable(str(exc))
        except Exception as exc:
            if len(batch) == 1:
                own.error = exc
            else:
                for job in batch:  # the statement rolled back whole: resend one by one
                    try:
                        [job.id] = await self._run([job.row])
                    except Exception as single:
                        job.error = single
        except BaseException:  # the loop is shutting down under the send
            for job in batch:
                job.error = DatabaseUnavailable(
                    "enqueue interrupted (event loop closing); the job was not confirmed")
            raise
        else:
            for job, job_id in zip(batch, ids, strict=True):
                job.id = job_id
        finally:
            for job in batch:
                job.done = True

    async def _run(self, rows: list[Row]) -> list[int]:
        self.batches += 1
        async with self.pool.cursor() as cur:
            if len(rows) > 1:
                return await self.run_plan(cur, insert_rows(rows))
            try:
                await cur.execute(INSERT_NOW, rows[0])
                return [(await cur.fetchone())[0]]
            except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName) as exc:
                raise missing_schema(exc) from exc
            except psycopg.OperationalError as exc:
                raw = cur.connection
                if raw.closed or raw.broken:
                    raise lost_connection(raw, exc) from None
                raise

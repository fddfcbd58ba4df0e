"""Flat combining for asyncio callers: ``shared.producers.combine`` on an event loop.

Tasks that enqueue a ``Row`` at the same time share one statement and one commit, with
at most ``MAX_LEADERS`` statements in flight per loop and database. The leader's send is
shielded: a leader cancelled while its batch is on the wire (a request timeout) does not
fail the other callers in that batch; they get their ids when it completes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from shared.db import DatabaseUnavailable
from shared.producers.combine import MAX_LEADERS, Pending
from shared.producers.drive import lost_connection, missing_schema
from shared.producers.plans import INSERT_NOW, Row, insert_rows


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

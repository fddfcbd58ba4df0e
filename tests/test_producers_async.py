"""enqueue_async / enqueue_many_async against real PostgreSQL: the caller's
AsyncConnection transaction, the per-loop pool, and the same errors as the sync API."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from shared.db import DatabaseUnavailable, SchemaMissing, UnusableConnection
from shared.producers.aio import enqueue_async, enqueue_many_async
from shared.producers.aio_pool import async_producer_pool
from workers.registry import REGISTRY, job

pytestmark = pytest.mark.timeout(60)

UNREACHABLE = "postgresql://nobody:secret@127.0.0.1:1/nowhere"


def count(conn, where: str = "true") -> int:
    return conn.execute(f"SELECT count(*) FROM supervisor.jobs WHERE {where}").fetchone()[0]


def test_jobs_join_the_async_transaction_commit_and_rollback(dsn, conn):
    async def main():
        async with await psycopg.AsyncConnection.connect(dsn) as caller:
            gone = await enqueue_async("k", {"n": 1}, conn=caller)
            await enqueue_many_async("k", [{"n": 2}, {"n": 3}], conn=caller)
            assert count(conn) == 0  # not visible before the caller's commit
            await caller.rollback()
            kept = await enqueue_async("k", {"n": 4}, queue="mail", conn=caller)
            many = await enqueue_many_async("k", [{"n": 5}, {"n": 6}], delay=60, conn=caller)
            await caller.commit()
            return gone, kept, many

    gone, kept, many = asyncio.run(main())
    rows = dict(conn.execute("SELECT id, (args->>'n')::int FROM supervisor.jobs").fetchall())
    assert rows == {kept: 4, many[0]: 5, many[1]: 6} and gone not in rows
    states = dict(conn.execute("SELECT id, state FROM supervisor.jobs").fetchall())
    assert states == {kept: "available", many[0]: "scheduled", many[1]: "scheduled"}


def test_async_pool_serves_concurrent_tasks_without_conn(dsn, conn, monkeypatch):
    @job(name="async_pool_kind", queue="aq")
    def handler(n: int) -> None: ...

    async def main():
        ids = await asyncio.gather(*(handler.enqueue_async(n=i) for i in range(64)))
        many = await handler.options(priority=3).enqueue_many_async([{"n": 100}, {"n": 101}])
        keyed = await enqueue_async("k", unique_key="once", dsn=dsn)
        again = await enqueue_async("k", unique_key="once", dsn=dsn)
        pool = async_producer_pool(dsn)
        opened, batches = pool.opened, pool.combiner.batches
        pool.close()
        return ids, many, keyed, again, opened, batches

    monkeypatch.setenv("SUPERVISOR_DSN", dsn)
    try:
        ids, many, keyed, again, opened, batches = asyncio.run(main())
    finally:
        REGISTRY.pop("async_pool_kind", None)
    assert len(set(ids)) == 64 and keyed == again
    # gather() starts all 64 before any I/O completes: the first two lead a batch of one
    # each on two connections, and the 62 others share the next statement.
    assert opened == 2 and batches == 3
    assert count(conn, "kind = 'async_pool_kind' AND queue = 'aq'") == 66
    assert count(conn, "priority = 3") == 2 and set(many).isdisjoint(ids)


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda dsn: psycopg.connect(dsn), TypeError, "synchronous connection"),
    (lambda dsn: object(), TypeError, "conn must be a psycopg AsyncConnection"),
])
def test_unsupported_connection_is_refused(dsn, conn, make, error, match):
    bad = make(dsn)

    async def main():
        with pytest.raises(error, match=match):
            await enqueue_async("k", conn=bad)
        with pytest.raises(error, match=match):
            await enqueue_many_async("k", [], conn=bad)

    asyncio.run(main())
    if isinstance(bad, psycopg.Connection):
        bad.close()
    assert count(conn) == 0


def test_closed_and_failed_async_connections_are_one_line_errors(dsn, conn):
    async def main():
        caller = await psycopg.AsyncConnection.connect(dsn)
        await caller.execute("SELECT 1")
        with pytest.raises(psycopg.errors.DivisionByZero):
            await caller.execute("SELECT 1/0")
        with pytest.raises(UnusableConnection, match=r"failed transaction.*roll it back"):
            await enqueue_async("k", conn=caller)
        with pytest.raises(UnusableConnection, match="failed transaction"):
            await enqueue_many_async("k", [{}], conn=caller)
        await caller.close()
        with pytest.raises(UnusableConnection, match="conn is closed"):
            await enqueue_async("k", conn=caller)

    asyncio.run(main())
    assert count(conn) == 0


def test_bad_input_and_missing_database_give_the_sync_errors(fresh_dsn):
    async def main():
        with pytest.raises(TypeError, match="must be a dict"):
            await enqueue_async("k", [1], dsn=UNREACHABLE)
        with pytest.raises(ValueError, match="max_attempts"):
            await enqueue_many_async("k", [{}], max_attempts=0, dsn=UNREACHABLE)
        with pytest.raises(DatabaseUnavailable, match="cannot connect to PostgreSQL at"):
            await enqueue_async("k", dsn=UNREACHABLE)
        async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as c:
            with pytest.raises(SchemaMissing, match="supervisor migrate"):
                await enqueue_async("k", conn=c)

    asyncio.run(main())

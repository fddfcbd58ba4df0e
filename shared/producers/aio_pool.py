"""The asyncio producers' connection pool: autocommit ``AsyncConnection``s per event loop,
DSN and process, used when no ``conn=`` is given.

One pool per event loop, because an ``AsyncConnection`` belongs to the loop it was
opened on (``asyncio.run()`` twice in one program gives two loops). No task or thread
runs in the background: connections are opened when a caller needs one and none is
idle, up to ``pool_size()``; a caller past that awaits one given back. As with the sync
pool, an idle connection the server has cut is noticed before use and replaced, a forked
child starts with no pools, and connections are closed when their loop is collected or
at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from shared.db import connect_async
from shared.producers.connections import looks_dead
from shared.producers.pool import APPLICATION_NAME, pool_size


class AsyncProducerPool:
    """Autocommit async connections to one database for one event loop, each with the
    one cursor it keeps for life; ``combiner`` batches concurrent Rows over them."""

    def __init__(self, dsn: str, max_size: int) -> None:
        self.dsn = dsn
        self.max_size = max_size
        self.pid = os.getpid()
        self.opened = 0
        self.combiner: Any = None  # an AsyncCombiner, set by shared.producers.aio
        self._idle: list[psycopg.AsyncCursor] = []
        self._freed = asyncio.Condition()

    @asynccontextmanager
    async def cursor(self) -> AsyncIterator[psycopg.AsyncCursor]:
        """Lend one connection's cursor for the ``async with`` block."""
        cur = await self._take()
        try:
            yield cur
        finally:
            await self._give_back(cur)

    async def _take(self) -> psycopg.AsyncCursor:
        while self._idle or self.opened >= self.max_size:
            if not self._idle:
                async with self._freed:
                    await self._freed.wait_for(
                        lambda: self._idle or self.opened < self.max_size)
                continue
            cur = self._idle.pop()
            if not looks_dead(cur.connection):
                return cur
            await self._discard(cur)
        self.opened += 1
        try:
            conn = await connect_async(self.dsn, application_name=APPLICATION_NAME)
        except BaseException:
            self.opened -= 1
            await self._notify()
            raise
        return psycopg.AsyncCursor(conn)

    async def _give_back(self, cur: psycopg.AsyncCursor) -> None:
        conn = cur.connection
        if conn.broken or conn.pgconn.transaction_status != TransactionStatus.IDLE:
            await self._discard(cur)
            return
        self._idle.append(cur)
        await self._notify()

    async def _discard(self, cur: psycopg.AsyncCursor) -> None:
        _finish(cur.connection)
        self.opened -= 1
        await self._notify()

    async def _notify(self) -> None:
        async with self._freed:
            self._freed.notify()

    def close(self) -> None:
        """Close the idle connections, without needing the loop."""
        idle, self._idle = self._idle, []
        for cur in idle:
            _finish(cur.connection)
            self.opened -= 1


def _finish(conn: psycopg.AsyncConnection) -> None:
    # Closing the socket needs no round trip, so it can happen outside the loop (at exit,
    # or when a loop is collected): libpq sends Terminate and closes.
    try:
        conn.pgconn.finish()
    except Exception:
        pass


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncProducerPool]]
_pools = weakref.WeakKeyDictionary()
_inherited: list[dict[str, AsyncProducerPool]] = []  # a forked child's copy, never used


def async_producer_pool(dsn: str) -> AsyncProducerPool:
    """The running loop's pool for ``dsn`` in this process, created on first use."""
    loop = asyncio.get_running_loop()
    pools = _pools.get(loop)
    if pools is None:
        pools = _pools[loop] = {}
        weakref.finalize(loop, _close_all, pools, os.getpid())
    pool = pools.get(dsn)
    if pool is None or pool.pid != os.getpid():
        pool = pools[dsn] = AsyncProducerPool(dsn, pool_size())
    return pool


def _close_all(pools: dict[str, AsyncProducerPool], pid: int) -> None:
    if pid == os.getpid():
        for pool in pools.values():
            pool.close()


def _after_fork_in_child() -> None:
    global _pools
    _inherited.extend(_pools.values())
    _pools = weakref.WeakKeyDictionary()


def close_async_pools() -> None:
    """Close this process's idle async producer connections (run at exit)."""
    for pools in list(_pools.values()):
        _close_all(pools, os.getpid())


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(close_async_pools)

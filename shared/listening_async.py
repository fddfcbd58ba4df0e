"""``shared.listening`` for asyncio: one LISTEN connection per event loop and database,
shared by every ``wait_async`` of that loop.

The same rules (opened by the first waiter, closed by the last, statements one at a
time, a lost connection re-opened with one backoff and every waiter reading its row
again), with a task instead of a reading thread: while waiters wait, a reader task
holds the connection inside ``notifies()``. A waiter that needs a statement cancels that
read (psycopg leaves the connection usable: nothing was sent) and takes the connection;
the reader takes it back afterwards. No thread is started.
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg

from shared.db import DatabaseUnavailable, connect_async, first_line
from shared.listening import (
    APPLICATION_NAME,
    BACKOFF_FIRST,
    BACKOFF_MAX,
    CHANNEL,
    SESSION_SETTINGS,
    Unreachable,
    _is_lost,
)

T = TypeVar("T")


@dataclass(eq=False)
class AsyncWaiter:
    """One ``wait_async`` call: the payload it waits for and how it is woken."""

    key: str
    event: asyncio.Event = field(default_factory=asyncio.Event)
    heard: bool = False


class AsyncListener:
    """The shared LISTEN connection of one event loop for one DSN."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.generation = 0
        self._use = asyncio.Lock()  # the connection
        self._conn: psycopg.AsyncConnection | None = None
        self._by_key: dict[str, set[AsyncWaiter]] = {}
        self._waiters: set[AsyncWaiter] = set()
        self._wanted = 0  # statements waiting for the connection
        self._reading: asyncio.Task | None = None  # the reader's notifies() read
        self._reader: asyncio.Task | None = None  # the reader's loop
        self._retry_at = 0.0
        self._backoff = 0.0
        self._error = ""

    async def run(self, statement: Callable[[psycopg.AsyncConnection, int], Awaitable[T]],
                  deadline: float | None) -> tuple[int, T]:
        """``Listener.run`` for asyncio."""
        self._wanted += 1
        try:
            if self._reading is not None:
                self._reading.cancel()  # let go of the connection
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                async with asyncio.timeout(left):
                    await self._use.acquire()
            except TimeoutError:
                raise TimeoutError("the shared connection stayed busy") from None
        finally:
            self._wanted -= 1
        try:
            conn = self._conn or await self._open()
            try:
                result = await statement(conn, self.generation)
                notes = [note async for note in conn.notifies(timeout=0)]
            except psycopg.OperationalError as exc:
                if not _is_lost(conn):
                    raise
                await self._lose()
                raise Unreachable(first_line(exc), connecting=False,
                                  retry_at=time.monotonic()) from None
            generation = self.generation
        finally:
            self._use.release()
        self._dispatch(notes)
        return generation, result

    async def _open(self) -> psycopg.AsyncConnection:
        # Holding _use.
        now = time.monotonic()
        if now < self._retry_at:
            raise Unreachable(self._error, connecting=True, retry_at=self._retry_at)
        conn = None
        try:
            conn = await connect_async(self.dsn, application_name=APPLICATION_NAME)
            await conn.execute(f"LISTEN {CHANNEL}")
            await conn.execute(SESSION_SETTINGS)
        except (DatabaseUnavailable, psycopg.OperationalError) as exc:
            if conn is not None:
                await conn.close()
            self._backoff = min(BACKOFF_MAX, max(BACKOFF_FIRST, self._backoff * 2))
            self._retry_at = now + self._backoff
            self._error = first_line(exc)
            raise Unreachable(self._error, connecting=True, retry_at=self._retry_at) from None
        self._backoff = 0.0
        self._conn = conn
        self.generation += 1
        for waiter in self._waiters:  # read again now, not at their next poll
            waiter.event.set()
        if self._reader is None:
            self._reader = asyncio.ensure_future(self._read_loop())
        return conn

    async def _lose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                pass
        self.generation += 1
        for waiter in self._waiters:
            waiter.event.set()

    async def _read_loop(self) -> None:
        me = asyncio.current_task()
        try:
            while True:
                async with self._use:
                    conn = self._conn
                    if conn is None:
                        return
                    read = self._reading = asyncio.ensure_future(self._read(conn))
                    if self._wanted:
                        read.cancel()
                    try:
                        await asyncio.wait({read})
                    finally:
                        self._reading = None
                        if not read.done():  # this loop was cancelled: end the read first
                            read.cancel()
                            await asyncio.wait({read})
                    if not read.cancelled() and read.exception() is not None:
                        if not isinstance(read.exception(), psycopg.OperationalError):
                            raise read.exception()  # type: ignore[misc]
                        await self._lose()
                        return
        finally:
            if self._reader is me:
                self._reader = None

    async def _read(self, conn: psycopg.AsyncConnection) -> None:
        async for note in conn.notifies():
            self._dispatch([note])

    def _dispatch(self, notes: list[psycopg.Notify]) -> None:
        for note in notes:
            for waiter in self._by_key.get(note.payload, ()):
                waiter.heard = True
                waiter.event.set()

    async def listen(self, waiter: AsyncWaiter, until: float, checked: int) -> None:
        """Return when ``waiter`` is notified, the connection changed since generation
        ``checked``, or at ``until`` (monotonic)."""
        waiter.event.clear()
        if waiter.heard or self.generation != checked:
            return
        try:
            async with asyncio.timeout(max(0.0, until - time.monotonic())):
                await waiter.event.wait()
        except TimeoutError:
            pass

    def _add(self, key: str) -> AsyncWaiter:
        waiter = AsyncWaiter(key)
        self._waiters.add(waiter)
        self._by_key.setdefault(key, set()).add(waiter)
        return waiter

    def _remove(self, waiter: AsyncWaiter) -> bool:
        self._waiters.discard(waiter)
        same = self._by_key.get(waiter.key)
        if same is not None:
            same.discard(waiter)
            if not same:
                del self._by_key[waiter.key]
        return not self._waiters

    async def close(self) -> None:
        """Stop reading and close the connection (when the last waiter has left)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.wait({reader})
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                pass


_listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncListener]]
_listeners = weakref.WeakKeyDictionary()


def acquire(dsn: str, key: str) -> tuple[AsyncListener, AsyncWaiter]:
    """The running loop's listener for ``dsn`` (created if none) and a new waiter on it;
    give both back with ``release``."""
    per_loop = _listeners.setdefault(asyncio.get_running_loop(), {})
    listener = per_loop.get(dsn)
    if listener is None:
        listener = per_loop[dsn] = AsyncListener(dsn)
    return listener, listener._add(key)


async def release(listener: AsyncListener, waiter: AsyncWaiter) -> None:
    """Forget ``waiter``; the last one out closes the connection. It is dropped from the
    table before the first await, so a new waiter makes a new listener."""
    if not listener._remove(waiter):
        return
    per_loop = _listeners.get(asyncio.get_running_loop(), {})
    if per_loop.get(listener.dsn) is listener:
        del per_loop[listener.dsn]
    await listener.close()


def _after_fork_in_child() -> None:
    # The parent's loops and connections are not the child's; keep them, unused.
    global _listeners
    _inherited.append(_listeners)
    _listeners = weakref.WeakKeyDictionary()


_inherited: list[Any] = []
os.register_at_fork(after_in_child=_after_fork_in_child)

"""The per-process pool of producer connections used when no ``conn=`` is given.

Concurrent callers (a web server's threads) each take their own autocommit connection
instead of queueing behind one. It is deliberately small and thread-free (no
psycopg_pool: that starts worker threads, and the supervisor's parent, which imports
this module's package, must stay single-threaded):

* created lazily, one pool per DSN and process, at most ``max_size`` connections
  (``SUPERVISOR_PRODUCER_POOL_SIZE``, default 10); a caller past that waits for one;
* fork-safe: after ``os.fork()`` the child starts with no pools, so its first enqueue
  opens its own connection. The parent's connections are kept referenced in the child,
  never closed or used: closing them there would end the parent's sessions;
* an idle connection the server has cut (restart, failover, idle kill) is noticed
  before anything is sent on it (see ``connections.looks_dead``) and replaced;
* closed at interpreter exit.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.pq import TransactionStatus

from shared.db import connect
from shared.dsn import is_embedded
from shared.migrate import migrate
from shared.producers.connections import looks_dead

ENV_POOL_SIZE = "SUPERVISOR_PRODUCER_POOL_SIZE"
DEFAULT_POOL_SIZE = 10
APPLICATION_NAME = "supervisor-enqueue"


def pool_size() -> int:
    """The most connections one process's pool opens to one database."""
    raw = os.environ.get(ENV_POOL_SIZE, "")
    if not raw:
        return DEFAULT_POOL_SIZE
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1:
        raise ValueError(f"{ENV_POOL_SIZE} must be an int of at least 1, not {raw!r}")
    return size


class ProducerPool:
    """Autocommit connections to one database for one process, handed out one caller at
    a time, most recently used first (its socket and plan cache are warm). Each keeps one
    cursor for its life: making a cursor per call cost a tenth of a fast enqueue."""

    def __init__(self, dsn: str, max_size: int) -> None:
        self.dsn = dsn
        self.max_size = max_size
        self.pid = os.getpid()
        self.opened = 0  # connections alive, idle or lent
        self._idle: list[psycopg.Cursor] = []
        self._cond = threading.Condition(threading.Lock())

    @contextmanager
    def cursor(self) -> Iterator[psycopg.Cursor]:
        """Lend one connection's cursor for the ``with`` block."""
        cur = self.take()
        try:
            yield cur
        finally:
            self.give_back(cur)

    def take(self) -> psycopg.Cursor:
        """A cursor on an idle live connection (opened if none is idle and the pool has
        room, else waited for); every ``take`` needs its ``give_back``."""
        while True:
            with self._cond:
                while not self._idle and self.opened >= self.max_size:
                    self._cond.wait()
                if not self._idle:
                    self.opened += 1
                    break
                cur = self._idle.pop()
            if not looks_dead(cur.connection):
                return cur
            self._discard(cur)
        try:
            connection = connect(self.dsn, application_name=APPLICATION_NAME)
            if is_embedded(self.dsn):  # as in the CLI: the development database migrates
                migrate(connection)
            return psycopg.Cursor(connection)
        except BaseException:
            self._forget_one()
            raise

    def give_back(self, cur: psycopg.Cursor) -> None:
        """Return a cursor from ``take``; a connection left broken or mid-transaction is
        closed instead of kept."""
        conn = cur.connection
        if conn.broken or conn.pgconn.transaction_status != TransactionStatus.IDLE:
            self._discard(cur)
            return
        with self._cond:
            self._idle.append(cur)
            self._cond.notify()

    def _discard(self, cur: psycopg.Cursor) -> None:
        try:
            cur.connection.close()
        except Exception:
            pass
        self._forget_one()

    def _forget_one(self) -> None:
        with self._cond:
            self.opened -= 1
            self._cond.notify()

    def close(self) -> None:
        """Close the idle connections (those lent out close when given back)."""
        with self._cond:
            idle, self._idle = self._idle, []
        for cur in idle:
            self._discard(cur)


_pools: dict[str, ProducerPool] = {}
_pools_lock = threading.Lock()
_inherited: list[ProducerPool] = []  # a forked child's copy of its parent's pools


def producer_pool(dsn: str) -> ProducerPool:
    """This process's pool for ``dsn``, created on first use."""
    pool = _pools.get(dsn)
    if pool is not None and pool.pid == os.getpid():
        return pool
    with _pools_lock:
        pool = _pools.get(dsn)
        if pool is None or pool.pid != os.getpid():
            pool = _pools[dsn] = ProducerPool(dsn, pool_size())
        return pool


def _after_fork_in_child() -> None:
    # Locks held by another thread at the fork stay held forever in the child: start over
    # with new ones and no connections, keeping the parent's objects alive but unused.
    global _pools, _pools_lock
    _inherited.extend(_pools.values())
    _pools = {}
    _pools_lock = threading.Lock()


def close_pools() -> None:
    """Close this process's producer connections (run at exit)."""
    for pool in list(_pools.values()):
        if pool.pid == os.getpid():
            pool.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(close_pools)

"""One LISTEN connection per process and database, shared by every waiting thread.

``supervisor.wait`` and ``Batch.wait`` used to open a connection each: 200 threads
waiting against ``max_connections = 100`` got "too many clients", and so did every other
client meanwhile. Here all waiters of a process share one autocommit connection that
LISTENs on ``supervisor_final``:

* it is opened by the first waiter and closed when the last one leaves (a LISTEN session
  nobody reads would hold back the server's notification queue);
* every statement of the waiters runs on it, one at a time (``_use``);
* it starts no thread: one of the waiting threads is the *reader*. It waits for the
  socket to become readable without holding the connection, so the others' statements
  go through meanwhile, takes the connection only to collect what arrived, and passes
  the role to another waiter when it leaves. A notification that arrives during another
  thread's statement lands in psycopg's backlog, collected by that thread before it lets
  the connection go;
* a lost connection is closed and the generation counter moves on: every waiter is woken
  to read its row again once a new connection LISTENs, since a notification sent in
  between is lost. Reconnects are spaced by one backoff for the whole process, so a
  thousand waiters do not hammer a server that is down;
* fork-safe: a child starts with no listeners and never touches its parent's (kept
  referenced, never used or closed, as the producer pool does).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg
from psycopg.pq import ConnStatus

from shared.db import DatabaseUnavailable, connect, first_line
from shared.fdwait import readable

CHANNEL = "supervisor_final"
APPLICATION_NAME = "supervisor-wait"
READ_SLICE = 1.0  # seconds the reader sleeps at most before looking at the generation
BACKOFF_FIRST = 0.05  # seconds before the second attempt to reconnect
BACKOFF_MAX = 2.0
# The watch mark is a hint: a crash that loses the last few marks also ends this
# connection, and every waiter marks its job again after the reconnect. So its commit
# need not wait for the WAL flush (8.4 ms a mark on a busy disk, against 1.5 ms).
SESSION_SETTINGS = "SET synchronous_commit = off"

T = TypeVar("T")


class Unreachable(Exception):
    """The shared connection could not be opened (``connecting``) or was lost during a
    statement; the next attempt to reconnect may be made at ``retry_at`` (monotonic)."""

    def __init__(self, message: str, *, connecting: bool, retry_at: float) -> None:
        super().__init__(message)
        self.connecting = connecting
        self.retry_at = retry_at


@dataclass(eq=False)
class Waiter:
    """One waiting call: the notification payload it waits for (``j<id>``, ``b<id>``)
    and how the listener wakes it."""

    key: str
    event: threading.Event = field(default_factory=threading.Event)
    heard: bool = False  # its notification came since it last read its row


class Listener:
    """The shared LISTEN connection of this process for one DSN (see the module's
    docstring). Waiters come and go through ``acquire`` / ``release``."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.pid = os.getpid()
        self.generation = 0  # moves on at every (re)connect and every loss
        self._use = threading.Lock()  # the connection; taken before _state, never after
        self._state = threading.Lock()  # the tables below
        self._conn: psycopg.Connection | None = None
        self._by_key: dict[str, set[Waiter]] = {}
        self._waiters: set[Waiter] = set()
        self._reader: Waiter | None = None
        self._retry_at = 0.0
        self._backoff = 0.0
        self._error = ""

    # -- statements ---------------------------------------------------------------
    def run(self, statement: Callable[[psycopg.Connection, int], T],
            deadline: float | None) -> tuple[int, T]:
        """Run ``statement(conn, generation)`` on the shared connection (opened first if
        need be); the generation it ran under and its result. ``Unreachable`` when the database
        cannot be reached, ``TimeoutError`` if ``deadline`` passes before the
        connection is free."""
        wait = -1 if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._use.acquire(timeout=wait):
            raise TimeoutError("the shared connection stayed busy")
        notes: list[psycopg.Notify] = []
        try:
            conn = self._conn or self._open()
            try:
                try:
                    result = statement(conn, self.generation)
                finally:
                    # What came meanwhile sits in psycopg's backlog, not on the socket
                    # the reader watches: collect it even when the statement raised
                    # (JobFailed, JobNotFound).
                    notes = list(conn.notifies(timeout=0))
            except psycopg.OperationalError as exc:
                if not _is_lost(conn):
                    raise
                self._lose()
                raise Unreachable(first_line(exc), connecting=False,
                                  retry_at=time.monotonic()) from None
            generation = self.generation
        finally:
            self._use.release()
            self._dispatch(notes)
        return generation, result

    def _open(self) -> psycopg.Connection:
        # Holding _use.
        now = time.monotonic()
        if now < self._retry_at:
            raise Unreachable(self._error, connecting=True, retry_at=self._retry_at)
        conn = None
        try:
            conn = connect(self.dsn, application_name=APPLICATION_NAME)
            conn.execute(f"LISTEN {CHANNEL}")
            conn.execute(SESSION_SETTINGS)
        except (DatabaseUnavailable, psycopg.OperationalError) as exc:
            if conn is not None:
                conn.close()
            self._backoff = min(BACKOFF_MAX, max(BACKOFF_FIRST, self._backoff * 2))
            self._retry_at = now + self._backoff
            self._error = first_line(exc)
            raise Unreachable(self._error, connecting=True, retry_at=self._retry_at) from None
        self._backoff = 0.0
        with self._state:
            self._conn = conn
            self.generation += 1
            for waiter in self._waiters:  # read again now, not at their next poll
                waiter.event.set()
        return conn

    def _lose(self) -> None:
        # Holding _use: the connection is gone; every waiter reads its row again.
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
        with self._state:
            self.generation += 1
            for waiter in self._waiters:
                waiter.event.set()

    # -- notifications -------------------------------------------------------------
    def listen(self, waiter: Waiter, until: float, checked: int) -> None:
        """Return when ``waiter`` is notified, the connection changed since generation
        ``checked``, or at ``until`` (monotonic); as the reader if nobody reads."""
        waiter.event.clear()
        with self._state:
            if waiter.heard or self.generation != checked:
                return
            lead = self._reader is None and self._conn is not None
            if lead:
                self._reader = waiter
        if not lead:
            waiter.event.wait(max(0.0, until - time.monotonic()))
            return
        try:
            self._read(waiter, until, checked)
        finally:
            self._step_down(waiter)

    def _read(self, waiter: Waiter, until: float, checked: int) -> None:
        while not waiter.heard and self.generation == checked:
            left = until - time.monotonic()
            conn = self._conn
            if left <= 0 or conn is None:
                return
            try:
                ready = readable([conn.pgconn.socket], min(left, READ_SLICE))
            except (OSError, ValueError, psycopg.OperationalError):
                ready = True  # the socket is gone: collecting will say so
            if ready:
                self._collect(checked)

    def _collect(self, generation: int) -> None:
        with self._use:
            conn = self._conn
            if conn is None or self.generation != generation:
                return
            try:
                notes = list(conn.notifies(timeout=0))
            except psycopg.OperationalError:
                self._lose()
                return
        self._dispatch(notes)

    def _dispatch(self, notes: list[psycopg.Notify]) -> None:
        if not notes:
            return
        with self._state:
            for note in notes:
                for waiter in self._by_key.get(note.payload, ()):
                    waiter.heard = True
                    waiter.event.set()

    def _step_down(self, waiter: Waiter) -> None:
        with self._state:
            if self._reader is waiter:
                self._reader = None
            successor = self._successor(waiter)
        if successor is not None:
            successor.event.set()  # it comes round to listen() and reads

    def _successor(self, leaving: Waiter) -> Waiter | None:
        # Holding _state.
        if self._reader is not None:
            return None
        return next((w for w in self._waiters if w is not leaving), None)

    # -- waiters -------------------------------------------------------------------
    def _add(self, key: str) -> Waiter:
        waiter = Waiter(key)
        with self._state:
            self._waiters.add(waiter)
            self._by_key.setdefault(key, set()).add(waiter)
        return waiter

    def _remove(self, waiter: Waiter) -> bool:
        """Forget ``waiter``; whether it was the last one."""
        with self._state:
            self._waiters.discard(waiter)
            same = self._by_key.get(waiter.key)
            if same is not None:
                same.discard(waiter)
                if not same:
                    del self._by_key[waiter.key]
            successor = self._successor(waiter)
            last = not self._waiters
        if successor is not None:
            successor.event.set()
        return last

    def close(self) -> None:
        """Close the connection (when the last waiter has left)."""
        with self._use:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def connections(self) -> int:
        """Connections open now (0 or 1), for tests."""
        return int(self._conn is not None and not self._conn.closed)


def _is_lost(conn: psycopg.Connection | psycopg.AsyncConnection) -> bool:
    return conn.closed or conn.broken or conn.pgconn.status != ConnStatus.OK


_listeners: dict[str, Listener] = {}
_registry = threading.Lock()
_inherited: list[Listener] = []  # a forked child's copy of its parent's listeners


def acquire(dsn: str, key: str) -> tuple[Listener, Waiter]:
    """This process's listener for ``dsn`` (created if none) and a new waiter on it for
    payload ``key``; give both back with ``release``."""
    with _registry:
        listener = _listeners.get(dsn)
        if listener is None or listener.pid != os.getpid():
            listener = _listeners[dsn] = Listener(dsn)
        return listener, listener._add(key)


def release(listener: Listener, waiter: Waiter) -> None:
    """Forget ``waiter``; the last one out closes the connection. Looked up and dropped
    under one lock, so a new waiter never joins a listener being closed."""
    with _registry:
        last = listener._remove(waiter)
        if last and _listeners.get(listener.dsn) is listener:
            del _listeners[listener.dsn]
    if last:
        listener.close()


def _after_fork_in_child() -> None:
    # A lock held by another thread at the fork stays held forever in the child.
    global _listeners, _registry
    _inherited.extend(_listeners.values())
    _listeners = {}
    _registry = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)

"""Opening the parent's connections, and a client-side deadline on everything they wait for.

The parent's loop enforces its children's deadlines, serves ``/healthz`` and acts on
signals; a statement that never answers would stall all of it. ``statement_timeout``
does not prevent that: the server enforces it, so a server whose processes are stopped,
a backend stuck in I/O, or a pooler or proxy holding queries during a failover never
sends the error. TCP keepalives do not either: the server's kernel answers them while
its processes are stopped, and a unix socket has none. So the client keeps its own
deadline: every blocking wait of a parent connection (connect, each statement, each
``BEGIN``/``COMMIT``) ends within ``deadline`` seconds, and past it the connection is
closed without waiting for anything (``DatabaseHung``, an ``OperationalError``: the
caller's outage path takes over and reconnects with its usual backoff).

Reconnecting does not block at all: ``Connecting`` opens a connection from the parent's
own selector, one libpq step per readable or writable socket, and the owner abandons it
past the deadline. So once a hang is found the loop waits for the database no more.

A stop signal must not wait for the database either. A wait also watches the signal
wakeup pipe (``Interrupt``): when one of its urgent signals arrives, the connection is
abandoned the same way (``Interrupted``) and the loop acts on the signal at once.

``statement_timeout`` stays: it makes the server give up on work nobody waits for, and
it is below the deadline, so a slow statement on a live server is a statement error
(retried), not an outage. Keepalives and ``tcp_user_timeout`` stay too: they close a
socket whose peer vanished while nobody waits on it (the LISTEN connection).
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from collections.abc import Collection
from typing import Any

import psycopg
from psycopg import generators
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.waiting import READY_NONE, READY_R, READY_W, Ready, Wait

from shared.db import check_dsn, unavailable
from shared.defaults import DATABASE_DEADLINE

KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,  # seconds of silence before the first probe
    "keepalives_interval": 3,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,  # ms: unacknowledged data this long means the peer is gone
}
URGENT_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGQUIT})


class DatabaseHung(psycopg.OperationalError):
    """The server did not answer within the deadline; the connection was abandoned."""


class Interrupted(psycopg.OperationalError):
    """An urgent signal arrived while waiting; the connection was abandoned."""


class Interrupt:
    """The signal wakeup pipe as a blocking wait sees it. ``signal.set_wakeup_fd`` writes
    each signal's number into it; a wait reads them and gives up ``URGENT_GRACE`` seconds
    after an ``urgent`` one arrived, and ``patience`` seconds after it began on a ``soft``
    one (a child's exit while draining). A healthy statement ends well within either, so
    only a wait the server does not answer is abandoned, and the last writes of a stop
    are not lost to it. The bytes it reads are only the wake-up: the signals themselves
    stay recorded by their handler, so the loop still acts on every one (it must not
    sleep while one is recorded and unhandled)."""

    URGENT, SOFT = "urgent", "soft"
    URGENT_GRACE = 0.05  # seconds a wait may go on once a stop signal arrived
    # Seconds a wait may last before a soft signal ends it. A drain's first write gives
    # back every claimed job not started: at -n 16 that was 3,000 rows, which took more
    # than the 0.25 s this once was on a loaded machine; the cut dropped both
    # connections, and the claim in flight with them, whose jobs then waited out their
    # lease (issue 48, docs/reliability.md). A hung server still holds a drain no longer
    # than this per wait.
    SOFT_PATIENCE = 2.0

    def __init__(self, fd: int, urgent: Collection[int] = URGENT_SIGNALS,
                 patience: float = SOFT_PATIENCE) -> None:
        self.fd = fd
        self.urgent = set(urgent)
        self.soft: set[int] = set()
        self.patience = patience

    def arrived(self) -> str | None:
        """Read the pipe empty; ``URGENT`` or ``SOFT`` if such a signal was among what
        arrived, else None."""
        seen: set[int] = set()
        try:
            while chunk := os.read(self.fd, 256):
                seen.update(chunk)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # the pipe is gone (uninstalled): nothing to watch any more
            pass
        if seen & self.urgent:
            return self.URGENT
        if seen & self.soft:
            return self.SOFT
        return None


class DeadlineConnection(psycopg.Connection):
    """A psycopg connection whose every wait ends within ``deadline`` seconds, or at an
    urgent signal of ``interrupt``; either way the connection is closed at once."""

    deadline: float = DATABASE_DEADLINE
    interrupt: Interrupt | None = None

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        """Consume ``gen`` as ``psycopg.Connection.wait`` does, within the deadline."""
        limit = self.deadline if timeout is None else min(timeout, self.deadline)
        fd = self.pgconn.socket
        try:
            return _drive(gen, lambda _: fd, limit, self.interrupt, conn_gen=False)
        except (DatabaseHung, Interrupted):
            self.pgconn.finish()  # non-blocking: nothing waits for the server here
            self._closed = True
            raise


def _drive(gen: Any, fd_of: Any, limit: float, interrupt: Interrupt | None,
           *, conn_gen: bool) -> Any:
    """Run a psycopg generator, waiting on its socket (and ``interrupt``) at most
    ``limit`` seconds in all. ``conn_gen``: a connection generator, which yields
    ``(fd, wait)`` pairs (the socket may change while connecting) instead of waits."""
    began = time.monotonic()
    deadline = began + limit
    signalled = False  # the deadline was brought forward by a signal
    with selectors.DefaultSelector() as sel:
        if interrupt is not None:
            sel.register(interrupt.fd, selectors.EVENT_READ, None)
        try:
            step = next(gen)
            while True:
                fd, wait = step if conn_gen else (fd_of(step), step)
                events = {Wait.R: selectors.EVENT_READ, Wait.W: selectors.EVENT_WRITE,
                          Wait.RW: selectors.EVENT_READ | selectors.EVENT_WRITE}[wait]
                sel.register(fd, events, fd)
                try:
                    ready: int = READY_NONE
                    while ready == READY_NONE:
                        left = deadline - time.monotonic()
                        if left <= 0 and signalled:
                            raise Interrupted("a stop signal arrived while waiting for "
                                              "the database, and it did not answer")
                        if left <= 0:
                            raise DatabaseHung(f"the database did not answer within "
                                               f"{limit:g} s (client-side deadline)")
                        for key, mask in sel.select(left):
                            if key.data is None:
                                seen = interrupt.arrived() if interrupt is not None else None
                                cut = None if seen is None else {
                                    Interrupt.URGENT: time.monotonic() + Interrupt.URGENT_GRACE,
                                    Interrupt.SOFT: began + interrupt.patience
                                    if interrupt is not None else 0.0}.get(seen)
                                if cut is not None and cut < deadline:
                                    deadline, signalled = cut, True
                                continue
                            ready = (READY_R if mask & selectors.EVENT_READ else 0) | \
                                    (READY_W if mask & selectors.EVENT_WRITE else 0)
                finally:
                    sel.unregister(fd)
                step = gen.send(Ready(ready))
        except StopIteration as done:
            return done.value


def _conninfo(dsn: str, name: str, statement_timeout: float, deadline: float) -> str:
    check_dsn(dsn)
    try:
        existing = conninfo_to_dict(dsn).get("options") or ""
        options = f"{existing} -c statement_timeout={int(statement_timeout * 1000)}".strip()
        # connect_timeout is libpq's (per host, whole seconds); the deadline is ours.
        return make_conninfo(dsn, application_name=name, options=options,
                             connect_timeout=max(1, round(deadline)), **KEEPALIVES)
    except psycopg.ProgrammingError as exc:
        raise unavailable(exc, dsn) from None


def _wrap(pgconn: Any, deadline: float, interrupt: Interrupt | None) -> DeadlineConnection:
    conn = DeadlineConnection(pgconn)
    conn.deadline = deadline
    conn.interrupt = interrupt
    conn.autocommit = True  # no round trip: the session is idle
    return conn


def open_connection(dsn: str, name: str, statement_timeout: float,
                    deadline: float = DATABASE_DEADLINE,
                    interrupt: Interrupt | None = None,
                    connect_within: float | None = None) -> DeadlineConnection:
    """An autocommit ``DeadlineConnection`` for the parent, named ``name`` in
    pg_stat_activity, opened blocking (at start). ``statement_timeout`` in seconds (0:
    none); ``deadline`` bounds the connect and every later wait. Raises
    ``DatabaseUnavailable`` with a one-line message that never shows the password.
    ``connect_within``: a shorter bound for the connect itself."""
    gen = generators.connect(_conninfo(dsn, name, statement_timeout, deadline))
    limit = deadline if connect_within is None else min(deadline, connect_within)
    try:
        pgconn = _drive(gen, None, limit, interrupt, conn_gen=True)
    except (DatabaseHung, Interrupted) as exc:
        gen.close()  # its half-open connection is freed (and closed) with it
        raise unavailable(exc, dsn) from None
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        raise unavailable(exc, dsn) from None
    return _wrap(pgconn, deadline, interrupt)


def open_connections(dsn: str, names: Collection[str], statement_timeout: float,
                     deadline: float = DATABASE_DEADLINE, interrupt: Interrupt | None = None,
                     connect_within: float | None = None) -> list[DeadlineConnection]:
    """``open_connection`` for each of ``names``, all at once: their connects (TCP,
    authentication, the server's fork of a backend) overlap, so a start waits for the
    slowest, not for each in turn (issue 31: the parent's three took 11-12 ms in turn on
    a quiet machine, 40 ms on a loaded one). The same deadline and stop signals as
    ``open_connection``. Raises ``DatabaseUnavailable`` with every one closed if any
    cannot be opened."""
    limit = deadline if connect_within is None else min(deadline, connect_within)
    began = time.monotonic()
    cut = began + limit
    signalled = False
    with selectors.DefaultSelector() as sel:
        if interrupt is not None:
            sel.register(interrupt.fd, selectors.EVENT_READ, None)
        pending = [Connecting(dsn, name, statement_timeout, deadline, sel, interrupt, cut)
                   for name in names]
        try:
            while not all(c.done for c in pending):
                failed = next((c.error for c in pending if c.error is not None), None)
                if failed is not None:
                    raise failed
                left = cut - time.monotonic()
                if left <= 0:
                    raise unavailable(Interrupted("a stop signal arrived while connecting")
                                      if signalled else DatabaseHung(
                                          f"the database did not answer within {limit:g} s "
                                          "(client-side deadline)"), dsn)
                for key, mask in sel.select(left):
                    if key.data is not None:
                        key.data.handle_event(key, mask)
                    elif interrupt is not None:
                        seen = interrupt.arrived()
                        at = {Interrupt.URGENT: time.monotonic() + Interrupt.URGENT_GRACE,
                              Interrupt.SOFT: began + interrupt.patience}.get(seen or "")
                        if at is not None and at < cut:
                            cut, signalled = at, True
            failed = next((c.error for c in pending if c.error is not None), None)
            if failed is not None:
                raise failed
        except BaseException:
            for connecting in pending:
                connecting.abandon()
            raise
    return [c.conn for c in pending if c.conn is not None]


class Connecting:
    """One connection being opened from the caller's selector, never blocking: each
    readable or writable socket moves libpq's connect one step (``handle_event``).
    ``conn`` is set once it is open, ``error`` (a ``DatabaseUnavailable``) once it
    failed; the owner calls ``abandon`` when it gives up (its deadline is
    ``deadline_at``)."""

    def __init__(self, dsn: str, name: str, statement_timeout: float, deadline: float,
                 selector: selectors.BaseSelector, interrupt: Interrupt | None,
                 deadline_at: float) -> None:
        self.dsn = dsn
        self.deadline = deadline
        self.deadline_at = deadline_at
        self.interrupt = interrupt
        self.selector = selector
        self.conn: DeadlineConnection | None = None
        self.error: Exception | None = None
        self._fd: int | None = None
        self._gen: Any = None
        try:
            self._gen = generators.connect(_conninfo(dsn, name, statement_timeout, deadline))
        except Exception as exc:  # DatabaseUnavailable: a DSN libpq cannot use
            self.error = exc
            return
        self._step(None)

    @property
    def done(self) -> bool:
        """Open or failed: nothing more will happen here."""
        return self.conn is not None or self.error is not None

    def handle_event(self, key: Any, mask: int) -> None:
        """The socket is ready: one more step of the connect."""
        ready = (READY_R if mask & selectors.EVENT_READ else 0) | \
                (READY_W if mask & selectors.EVENT_WRITE else 0)
        self._step(Ready(ready))

    def _step(self, ready: Ready | None) -> None:
        # The socket may change between steps (libpq tries the next address), and a
        # closed fd's number may come back for the new one: register afresh each step.
        self._unwatch()
        try:
            fd, wait = next(self._gen) if ready is None else self._gen.send(ready)
        except StopIteration as done:
            self._gen = None
            self.conn = _wrap(done.value, self.deadline, self.interrupt)
            return
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
            self._gen = None
            self.error = unavailable(exc, self.dsn)
            return
        events = {Wait.R: selectors.EVENT_READ, Wait.W: selectors.EVENT_WRITE,
                  Wait.RW: selectors.EVENT_READ | selectors.EVENT_WRITE}[wait]
        self.selector.register(fd, events, data=self)
        self._fd = fd

    def abandon(self) -> None:
        """Stop connecting (the deadline passed, or a sibling failed) and close it."""
        self._unwatch()
        if self._gen is not None:
            self._gen.close()  # the half-open connection is freed (and closed) with it
            self._gen = None
        if self.conn is not None:
            self.conn.close()

    def _unwatch(self) -> None:
        if self._fd is not None:
            try:
                self.selector.unregister(self._fd)
            except (KeyError, ValueError, OSError):
                pass
            self._fd = None


def close_quietly(conn: psycopg.Connection) -> None:
    """Close ``conn``, ignoring any error: a broken connection may fail to close, and it
    is gone either way."""
    try:
        conn.close()
    except Exception:
        pass

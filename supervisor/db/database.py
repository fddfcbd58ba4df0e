"""The parent's two connections (work and LISTEN), and riding out database outages.

Every call into the store goes through ``Database.call``: if the connection is lost the
error is logged once per outage, the supervisor keeps its children running and their
outcomes in memory, and reconnects with capped, jittered backoff. Fenced writes make the
late writes safe: a job another supervisor rescued meanwhile is not overwritten.
"""

from __future__ import annotations

import logging
import random
import selectors
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from shared.db import DatabaseUnavailable, connect, first_line
from shared.dsn import describe
from supervisor.db.nonblocking import AsyncQuery
from supervisor.db.store import Store

log = logging.getLogger("supervisor.database")

NOTIFY_CHANNEL = "supervisor_jobs"
CANCEL_CHANNEL = "supervisor_cancel"
T = TypeVar("T")

# Errors that mean "the connection is gone", as opposed to a bad statement.
CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


class Database:
    """Work connection (the store), LISTEN connection (wake-ups), reconnection."""

    def __init__(self, dsn: str, owner: str, lease_ttl: float,
                 selector: selectors.BaseSelector, *, clock: Callable[[], float] = time.monotonic,
                 max_backoff: float = 10.0, synchronous_commit: bool = True) -> None:
        self.dsn = dsn
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.selector = selector
        self.clock = clock
        self.max_backoff = max_backoff
        self.synchronous_commit = synchronous_commit
        self.store: Store | None = None
        self.fast: AsyncQuery | None = None  # the claim path's non-blocking connection
        self.listen_conn: psycopg.Connection | None = None
        self._listen_fd: int | None = None
        self.notified_queues: set[str] = set()
        self.cancelled_jobs: set[int] = set()
        self.down_since: float | None = None
        self.retry_at: float = 0.0
        self._failures = 0

    @property
    def up(self) -> bool:
        """Whether the work connection is usable now."""
        return self.store is not None and self.down_since is None

    def open(self) -> None:
        """Connect both connections; raises ``DatabaseUnavailable`` (used at start, where
        an unreachable database is a one-line error, not a retry loop)."""
        work = connect(self.dsn, application_name=f"supervisor {self.owner}")
        fast = connect(self.dsn, application_name=f"supervisor {self.owner} claims")
        if not self.synchronous_commit:
            for conn in (work, fast):
                conn.execute("SET synchronous_commit = off")
        self.fast = AsyncQuery(fast, self.selector)
        listen = connect(self.dsn, application_name=f"supervisor {self.owner} listen")
        if self.store is None:
            self.store = Store(work, self.owner, self.lease_ttl)
        else:
            self.store.conn = work
        self.listen_conn = listen
        listen.execute(f"LISTEN {NOTIFY_CHANNEL}")
        listen.execute(f"LISTEN {CANCEL_CHANNEL}")
        self._listen_fd = listen.fileno()
        self.selector.register(self._listen_fd, selectors.EVENT_READ, data=self)

    def call(self, what: Callable[[Store], T], default: T) -> T:
        """Run ``what(store)``; on a lost connection mark the outage and return
        ``default`` (the caller keeps its data and tries again once reconnected)."""
        if not self.up:
            return default
        try:
            return what(self.store)
        except CONNECTION_ERRORS as exc:
            self._lost(exc)
            return default

    def handle_event(self, key: Any, mask: int) -> None:
        """The LISTEN socket is readable: collect the queues and cancellations named."""
        conn = self.listen_conn
        if conn is None:
            return
        try:
            conn.pgconn.consume_input()
            while (note := conn.pgconn.notifies()) is not None:
                payload = note.extra.decode("utf-8", "replace")
                if note.relname == NOTIFY_CHANNEL.encode():
                    self.notified_queues.add(payload)
                elif note.relname == CANCEL_CHANNEL.encode() and payload.isdigit():
                    self.cancelled_jobs.add(int(payload))
        except (psycopg.Error, OSError) as exc:
            self._lost(exc)

    def take_notified(self) -> set[str]:
        """Queues named by NOTIFY since the last call."""
        queues, self.notified_queues = self.notified_queues, set()
        return queues

    def take_cancelled(self) -> set[int]:
        """Job ids named on the cancel channel since the last call."""
        ids, self.cancelled_jobs = self.cancelled_jobs, set()
        return ids

    def maybe_reconnect(self) -> bool:
        """While down, try again when the backoff allows; True when back up."""
        if self.up:
            return True
        now = self.clock()
        if now < self.retry_at:
            return False
        self._close()
        try:
            self.open()
        except DatabaseUnavailable:
            self._failures += 1
            delay = min(self.max_backoff, 0.25 * 2 ** min(self._failures, 10))
            self.retry_at = now + delay * random.uniform(0.5, 1.0)
            return False
        outage = now - (self.down_since or now)
        log.warning("database connection restored after %.1f s", outage)
        self.down_since = None
        self._failures = 0
        return True

    def next_retry(self) -> float | None:
        """When the next reconnection attempt is due (None while up)."""
        return None if self.up else self.retry_at

    def close(self) -> None:
        """Close both connections (at exit)."""
        self._close()

    def lost(self, exc: BaseException) -> None:
        """Report a connection error seen outside ``call`` (the non-blocking claim)."""
        self._lost(exc)

    def _lost(self, exc: BaseException) -> None:
        if self.down_since is None:
            self.down_since = self.clock()
            self.retry_at = self.down_since
            log.error("database connection lost (%s: %s); children keep running, outcomes "
                      "are held in memory until it is back", describe(self.dsn), first_line(exc))
        self._close()

    def _close(self) -> None:
        if self.fast is not None:
            fast, self.fast = self.fast, None
            abandoned = fast.abandon()
            _quietly_close(fast.conn)
            if abandoned is not None:
                abandoned(psycopg.OperationalError("the connection was closed"))
        if self._listen_fd is not None:
            try:
                self.selector.unregister(self._listen_fd)
            except (KeyError, ValueError):
                pass
            self._listen_fd = None
        if self.listen_conn is not None:
            _quietly_close(self.listen_conn)
            self.listen_conn = None
        if self.store is not None and self.store.conn is not None:
            _quietly_close(self.store.conn)


def _quietly_close(conn: psycopg.Connection) -> None:
    try:
        conn.close()
    except Exception:  # a broken connection may fail to close; it is gone either way
        pass

"""The parent's three connections, and riding out database outages and errors.

* work: blocking statements through the ``Store`` (writes, renewals, maintenance);
* claims: the non-blocking connection the claim path runs on (``NonBlockingQuery``);
* listen: LISTEN for new work and for cancellations (none in poll-only mode).

Every blocking call goes through ``Database.call``. A lost connection starts an outage:
logged once, the caller gets its default and keeps its data, and ``maybe_reconnect``
tries again with short jittered backoff (the loop is back within about a second of the
server answering). Any other database error is logged and the caller gets its default
too: one bad statement never takes the supervisor and its children down.

A database that accepts connections but does not answer (its processes stopped, a
pooler holding queries during a failover, a backend stuck in I/O) is an outage too, found
by the client-side ``deadline`` (``supervisor.db.connections``): no blocking wait of the
connect, a statement or LISTEN outlasts it, and the claim in flight on the non-blocking
connection is abandoned once it is older than the deadline (``expire``). An abandoned
connection is closed without waiting and reconnected with the usual backoff, so the
loop is never held longer than one deadline, and an urgent signal ends the wait at once.

Poll-only mode (``listen=False``, or found at start): behind a pooler in transaction mode
LISTEN is refused, or accepted and never delivered (PgBouncer), so a NOTIFY from the work
connection is awaited on the listen connection; if it does not arrive, the supervisor
warns, drops LISTEN and leans on its polls (every ``poll_interval``), and stops preparing
statements server-side (a pooler without protocol-level prepared statements hands each
transaction a different server connection, where the name is unknown).
"""

from __future__ import annotations

import logging
import os
import random
import selectors
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from shared.db import DatabaseUnavailable, SchemaMissing, first_line
from shared.defaults import (
    CANCEL_CHANNEL,
    DATABASE_DEADLINE,
    KEYS_CHANNEL,
    NOTIFY_CHANNEL,
    PAUSED_CHANNEL,
    SCHEDULED_CHANNEL,
    SETTINGS_CHANNEL,
)
from shared.dsn import describe
from supervisor.db.claim import ClaimKey
from supervisor.db.connections import (
    Connecting,
    DatabaseHung,
    Interrupt,
    Interrupted,
    close_quietly,
    open_connections,
)
from supervisor.db.nonblocking import NonBlockingQuery
from supervisor.db.store import Store, StoreSettings
from supervisor.db.throttled_log import ThrottledLog

log = logging.getLogger("supervisor.database")

T = TypeVar("T")

# SQLSTATEs that end the session: class 08 (connection exception) and the server going
# down or not yet accepting (admin/crash shutdown, cannot connect now).
_SESSION_ENDING = ("08", "57P01", "57P02", "57P03")


class ServerWentAway(DatabaseUnavailable):
    """The server accepted the connections, then dropped them before they were ready
    (a restart or a terminated backend): the database is there, so this is an outage,
    not an unreachable database. ``cause`` is the error that ended the connection."""

    def __init__(self, message: str, cause: psycopg.Error) -> None:
        super().__init__(message)
        self.cause = cause


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (reconnect), as opposed to a
    statement that failed on a live connection (a timeout, a lock, bad data: retry)."""
    if isinstance(exc, psycopg.InterfaceError):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    sqlstate = getattr(exc, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(_SESSION_ENDING)
_CHANNELS = (NOTIFY_CHANNEL, CANCEL_CHANNEL, SCHEDULED_CHANNEL, PAUSED_CHANNEL, KEYS_CHANNEL,
             SETTINGS_CHANNEL)
_NOTIFY, _CANCEL, _SCHEDULED, _PAUSED, _KEYS, _SETTINGS = (c.encode() for c in _CHANNELS)
PROBE_TIMEOUT = 2.0  # seconds a self-NOTIFY may take before LISTEN counts as broken
MAX_BACKOFF = 1.0  # seconds between reconnection attempts, at most
EXIT_CONNECT = 0.3  # seconds the connect at exit may take (see reopen_for_exit)


class Database:
    """The store (work connection), the claim connection, LISTEN, and reconnection."""

    def __init__(self, dsn: str, owner: str, lease_ttl: float,
                 selector: selectors.BaseSelector, *, statement_timeout: float,
                 clock: Callable[[], float] = time.monotonic,
                 max_backoff: float = MAX_BACKOFF, listen: bool = True,
                 deadline: float = DATABASE_DEADLINE,
                 store_settings: StoreSettings | None = None) -> None:
        self.dsn = dsn
        self.deadline = deadline  # client-side bound on any one wait for the server
        # The signal wakeup pipe: a stop signal ends a wait at once (set by the arbiter).
        self.interrupt: Interrupt | None = None
        self.listen = listen  # False: poll only (asked for, or LISTEN found not to work)
        self.owner = owner
        self.selector = selector
        self.statement_timeout = statement_timeout
        self.clock = clock
        self.max_backoff = max_backoff
        # Its connection comes with open(); its settings are the handlers' (StoreSettings).
        self.store = Store(None, owner, lease_ttl, settings=store_settings)
        self.claims: NonBlockingQuery | None = None
        self.listen_conn: psycopg.Connection | None = None
        self._listen_fd: int | None = None
        self.notified_queues: set[str] = set()  # got available work
        self.scheduled_queues: set[str] = set()  # got work for later
        self.paused_queues: set[str] = set()
        self.cancelled_jobs: set[int] = set()
        self.notified_keys: dict[str, ClaimKey] = {}  # queue -> first key made available
        # queue -> lowest batch a member was made available in (None: jobs of no batch);
        # a queue told by a payload without the field is left out
        self.notified_batches: dict[str, int | None] = {}
        self._batchless_notices: set[str] = set()  # queues told without the field
        self.named_batches: dict[str, set[int]] = {}  # every batch told, per queue
        self.settings_changed: set[str] = set()  # "kind_pauses", "queue_limits" (NOTIFY)
        self.down_since: float | None = None
        self.retry_at = 0.0
        self.connecting: list[Connecting] | None = None  # a reconnection under way
        self.outages = 0  # how many times the connection was lost (for the engine)
        # The last outage began with a wait a stop signal cut short: the server may well
        # be fine, so the last writes at exit are worth one more connect.
        self.cut_short = False
        # The server went away before the start-up's schema check was done: the
        # reconnection does it.
        self.schema_unchecked = False
        self._failures = 0
        self._errors = ThrottledLog(log, logging.ERROR, clock)

    @property
    def up(self) -> bool:
        """Whether the connections are usable now."""
        return self.store.conn is not None and self.down_since is None

    def _names(self) -> list[str]:
        name = f"supervisor {self.owner}"
        return [name + suffix for suffix in ("", " claims", " listen")[:3 if self.listen else 2]]

    def open(self, connect_within: float | None = None, *, check_schema: bool = False) -> None:
        """Connect all three, blocking (at start); raises ``DatabaseUnavailable`` (at
        start an unreachable database is a one-line error, not a retry loop).
        ``connect_within``: a shorter bound than the deadline for each connect.
        ``check_schema``: raise ``SchemaMissing`` (connections closed) unless the schema
        is this code's; checked on the work connection, so a start opens no fourth
        connection for it (issue 31: a connection of its own cost 3-7 ms before the
        first claim)."""
        conns: list[psycopg.Connection] = list(open_connections(
            self.dsn, self._names(), self.statement_timeout, self.deadline, self.interrupt,
            connect_within))
        self._adopt(conns, check_schema=check_schema)

    def start(self, *, check_schema: bool = False) -> None:
        """Connect at start, as ``open``; but a server that answered and then dropped the
        connections before start-up was done (restarted as the supervisor started)
        begins an outage, as it would a minute later, instead of a start-up error. Only
        a server that cannot be reached at all raises ``DatabaseUnavailable``."""
        try:
            self.open(check_schema=check_schema)
        except ServerWentAway as gone:
            self.schema_unchecked = check_schema
            self.lost(gone.cause)

    def _adopt(self, conns: list[psycopg.Connection], *, check_schema: bool = False) -> None:
        """Start using freshly opened connections: the schema's version (with
        ``check_schema``), LISTEN (with its check), then the work, claim and listen
        roles. Raises ``DatabaseUnavailable`` or ``SchemaMissing`` (all closed)."""
        try:
            if check_schema:
                from shared.migrate import ensure_schema

                ensure_schema(conns[0])
            work, claims = conns[:2]
            listen = self._start_listening(work, conns[2]) \
                if self.listen and len(conns) > 2 else None
            if not self.listen:
                work.prepare_threshold = None  # see the module docstring
                for extra in conns[2:]:
                    close_quietly(extra)
            else:
                # The claims prepared on this connection run on their generic plan
                # (supervisor.db.nonblocking explains why); nothing else is prepared here.
                claims.execute("SET plan_cache_mode = force_generic_plan")
        except psycopg.Error as exc:
            for conn in conns:
                close_quietly(conn)
            message = f"lost PostgreSQL at {describe(self.dsn)} while connecting: " \
                      f"{first_line(exc)}"
            if connection_lost(exc):
                raise ServerWentAway(message, exc) from None
            raise DatabaseUnavailable(message) from None
        except SchemaMissing:
            for conn in conns:
                close_quietly(conn)
            raise
        self.store.conn = work
        self.claims = NonBlockingQuery(claims, self.selector, clock=self.clock)
        self.claims.prepares = self.listen  # see the module docstring
        if listen is not None:
            self.listen_conn = listen
            self._listen_fd = listen.fileno()
            self.selector.register(self._listen_fd, selectors.EVENT_READ, data=self)

    def _start_listening(self, work: psycopg.Connection,
                         listen: psycopg.Connection) -> psycopg.Connection | None:
        """LISTEN on ``listen`` and check a NOTIFY from ``work`` arrives; None (and
        ``self.listen`` False, with a warning) when LISTEN is refused or deaf."""
        probe = f"supervisor_probe_{os.getpid()}_{random.getrandbits(32):x}"
        try:
            listen.execute("; ".join(f"LISTEN {channel}" for channel in (*_CHANNELS, probe)))
            work.execute(f"NOTIFY {probe}")
            heard = _await_notify(listen, probe.encode(), PROBE_TIMEOUT)
            listen.execute(f"UNLISTEN {probe}")
        except psycopg.Error as exc:
            if connection_lost(exc):
                raise
            reason = f"LISTEN failed ({first_line(exc)})"
        else:
            if heard:
                return listen
            reason = f"a NOTIFY did not arrive within {PROBE_TIMEOUT:g} s"
        log.warning("%s at %s, as behind a pooler in transaction mode: polling every "
                    "poll_interval instead (set listen = false or --no-listen to skip this "
                    "check)", reason, describe(self.dsn))
        close_quietly(listen)
        self.listen = False
        return None

    def call(self, what: Callable[[Store], T], default: T, operation: str = "query") -> T:
        """Run ``what(store)``. On a lost connection mark the outage; on any other
        database error log it (``operation`` names it); either way return ``default``
        and let the caller try again later with the data it kept."""
        if not self.up:
            return default
        try:
            return what(self.store)
        except psycopg.Error as exc:
            if connection_lost(exc):
                self.lost(exc)
            else:
                self.failed(operation, exc)
        return default

    def refresh_plans(self) -> None:
        """Have every statement prepared on the parent's connections planned again, from
        the tables as they are now, at its next use (``supervisor.db.nonblocking`` says
        why): the claim connection's before its next claim, the work connection's now.
        Poll-only (behind a pooler) nothing is prepared, so nothing is asked."""
        if not self.up or not self.listen:
            return
        if self.claims is not None:
            self.claims.discard_plans()
        self.call(lambda store: store.discard_plans(), None, "asking for fresh plans")

    def expire(self, now: float) -> None:
        """Abandon the claim in flight if the server has not answered it within the
        deadline (a hung server never sends the error ``statement_timeout`` promises)."""
        claims = self.claims
        if claims is not None and claims.busy and now >= claims.sent_at + self.deadline:
            self.lost(DatabaseHung(f"a claim got no answer within {self.deadline:g} s "
                                   f"(client-side deadline)"))

    def next_expiry(self) -> float | None:
        """When the claim in flight is abandoned if still unanswered (None: none)."""
        claims = self.claims
        if claims is None or not claims.busy:
            return None
        return claims.sent_at + self.deadline

    def failed(self, operation: str, exc: BaseException) -> None:
        """Log a database error that is not a lost connection (rate-limited per
        operation: a statement failing every round must not flood the log)."""
        self._errors.failed(operation, exc)

    def handle_event(self, key: Any, mask: int) -> None:
        """The LISTEN socket is readable: collect the queues and cancellations named."""
        conn = self.listen_conn
        if conn is None:
            return
        try:
            conn.pgconn.consume_input()
            while (note := conn.pgconn.notifies()) is not None:
                payload = note.extra.decode("utf-8", "replace")
                channel = note.relname
                if channel == _NOTIFY:
                    self.notified_queues.add(payload)
                elif channel == _CANCEL and payload.isdigit():
                    self.cancelled_jobs.add(int(payload))
                elif channel == _SCHEDULED:
                    self.scheduled_queues.add(payload)
                elif channel == _PAUSED:
                    self.paused_queues.add(payload)
                elif channel == _KEYS:
                    self._note_key(payload)
                elif channel == _SETTINGS:
                    self.settings_changed.add(payload)
        except (psycopg.Error, OSError) as exc:
            self.lost(exc)

    def take_notified(self) -> set[str]:
        """Queues named by NOTIFY since the last call."""
        queues, self.notified_queues = self.notified_queues, set()
        return queues

    def _note_key(self, payload: str) -> None:
        """Keep the first claim-order key per queue named on the keys channel, and the
        lowest batch named with it. The payload is ``queue, priority, run_at`` and
        ``b<batch id>`` (``b`` alone: no batch), tab-separated; a database whose
        schema predates the batch field sends the first three only."""
        queue, _, rest = payload.rpartition("\t")
        batch_field: str | None = None  # None: the payload has no batch field
        if rest.startswith("b"):
            batch_field = rest[1:]
            if batch_field and not batch_field.isdigit():
                return  # not ours: the schema's payloads always parse
            queue, _, rest = queue.rpartition("\t")
        queue, _, priority = queue.rpartition("\t")
        try:
            key = ClaimKey(int(priority), float(rest))
        except ValueError:
            return  # not ours: the schema's payloads always parse
        if not queue:
            return
        if queue not in self.notified_keys or key < self.notified_keys[queue]:
            self.notified_keys[queue] = key
        if batch_field is None:
            self._batchless_notices.add(queue)
        elif batch_field:
            held = self.notified_batches.get(queue)
            told = int(batch_field)
            self.notified_batches[queue] = told if held is None else min(held, told)
            self.named_batches.setdefault(queue, set()).add(told)
        else:
            self.notified_batches.setdefault(queue, None)

    def take_notified_keys(self) -> dict[str, ClaimKey]:
        """Per queue, the first claim-order key of the jobs made available (NOTIFY on
        the keys channel) since the last call."""
        keys, self.notified_keys = self.notified_keys, {}
        return keys

    def take_notified_batches(self) -> dict[str, int | None]:
        """Per queue told on the keys channel since the last call, the lowest batch a
        member was made available in (None: only jobs of no batch). A queue any notice
        named without the batch field (an older schema) is left out: its batch is not
        known."""
        batches, self.notified_batches = self.notified_batches, {}
        for queue in self._batchless_notices:
            batches.pop(queue, None)
        self._batchless_notices = set()
        return batches

    def take_named_batches(self) -> dict[str, set[int]]:
        """Per queue, every batch the keys channel named since the last call (each
        notice names the lowest of its own): a newcomer batch is seen even when a
        notice of a lower one came in the same turn."""
        named, self.named_batches = self.named_batches, {}
        return named

    def take_scheduled(self) -> set[str]:
        """Queues that got a job for later (NOTIFY) since the last call."""
        queues, self.scheduled_queues = self.scheduled_queues, set()
        return queues

    def take_paused(self) -> set[str]:
        """Queues paused (NOTIFY) since the last call."""
        queues, self.paused_queues = self.paused_queues, set()
        return queues

    def take_settings_changed(self) -> set[str]:
        """The settings tables (``kind_pauses``, ``queue_limits``) a NOTIFY said changed
        since the last call."""
        changed, self.settings_changed = self.settings_changed, set()
        return changed

    def take_cancelled(self) -> set[int]:
        """Job ids named on the cancel channel since the last call."""
        ids, self.cancelled_jobs = self.cancelled_jobs, set()
        return ids

    def maybe_reconnect(self) -> bool:
        """While down: when the backoff allows, start connecting without blocking (the
        selector moves each connection along), then check on it; True once back up."""
        if self.up:
            return True
        now = self.clock()
        if self.connecting is None:
            if now < self.retry_at:
                return False
            self._close()
            try:
                self.connecting = self._start_attempt(now)
            except DatabaseUnavailable:
                return self._attempt_failed()
        attempt = self.connecting
        pending = not all(c.done for c in attempt)
        if any(c.error is not None for c in attempt) or (
                pending and now >= attempt[0].deadline_at):
            return self._attempt_failed()
        if pending:
            return False
        self.connecting = None
        if attempt:
            try:
                self._adopt([c.conn for c in attempt if c.conn is not None],
                            check_schema=self.schema_unchecked)
            except DatabaseUnavailable:
                return self._attempt_failed()
            self.schema_unchecked = False
        log.warning("database connection restored after %.1f s",
                    now - (self.down_since or now))
        self.down_since = None
        self._failures = 0
        return True

    def _start_attempt(self, now: float) -> list[Connecting]:
        """Start opening every connection from the selector (an empty list: they are
        open already)."""
        deadline_at = now + self.deadline
        return [Connecting(self.dsn, name, self.statement_timeout, self.deadline,
                           self.selector, self.interrupt, deadline_at)
                for name in self._names()]

    def _attempt_failed(self) -> bool:
        for connecting in self.connecting or ():
            connecting.abandon()
        self.connecting = None
        self._failures += 1
        delay = min(self.max_backoff, 0.1 * 2 ** min(self._failures, 10))
        self.retry_at = self.clock() + delay * random.uniform(0.5, 1.0)
        return False

    def next_retry(self) -> float | None:
        """When the next reconnection attempt is due, or the one under way is given up
        (None while up)."""
        if self.up:
            return None
        if self.connecting:
            return self.connecting[0].deadline_at
        return self.retry_at

    def lost(self, exc: BaseException) -> None:
        """The connection broke (seen here, or by the claim path): start an outage."""
        if self.down_since is None:
            self.cut_short = isinstance(exc, Interrupted)
            self.down_since = self.clock()
            self.retry_at = self.down_since
            self.outages += 1
            log.error("database connection lost (%s: %s); children keep running, outcomes "
                      "are held in memory until it is back", describe(self.dsn), first_line(exc))
        self._close()

    def reopen_for_exit(self) -> None:
        """At exit, after an outage that a stop signal began (the server was only slow
        to answer, perhaps): one blocking try to connect again, bounded by the deadline,
        so the last outcomes can be written. Does nothing otherwise. A server that
        answers connects in milliseconds; a hung one costs ``EXIT_CONNECT`` at most."""
        if self.up or not self.cut_short:
            return
        for connecting in self.connecting or ():
            connecting.abandon()
        self.connecting = None
        self._close()
        try:
            self.open(connect_within=EXIT_CONNECT)
        except DatabaseUnavailable:
            return
        self.down_since = None
        log.info("database connection restored to write the last outcomes")

    def close(self) -> None:
        """Close every connection (at exit)."""
        for connecting in self.connecting or ():
            connecting.abandon()
        self.connecting = None
        self._close()

    def _close(self) -> None:
        if self.claims is not None:
            claims, self.claims = self.claims, None
            abandoned = claims.abandon()
            close_quietly(claims.conn)
            if abandoned is not None:
                abandoned(psycopg.OperationalError("the connection was closed"))
        if self._listen_fd is not None:
            try:
                self.selector.unregister(self._listen_fd)
            except (KeyError, ValueError):
                pass
            self._listen_fd = None
        if self.listen_conn is not None:
            close_quietly(self.listen_conn)
            self.listen_conn = None
        if self.store.conn is not None:
            close_quietly(self.store.conn)
            self.store.conn = None


def _await_notify(conn: psycopg.Connection, channel: bytes, timeout: float) -> bool:
    """Whether a notification on ``channel`` reaches ``conn`` within ``timeout`` s (the
    others that arrive meanwhile are dropped: the first poll finds their work)."""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(conn.fileno(), selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            sel.select(left)
            conn.pgconn.consume_input()
            while (note := conn.pgconn.notifies()) is not None:
                if note.relname == channel:
                    return True
    return False

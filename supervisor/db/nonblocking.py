"""One statement at a time on a connection the parent's selector drives: no blocking.

The parent claims short jobs in batches. Run as an ordinary (blocking) call, each claim
stops the whole loop for a round trip and a commit, and every child that finishes
meanwhile sits idle until it is over. This runs the claim on a connection of its own in
libpq's non-blocking mode: the statement is sent, the loop goes on reading results and
dispatching, and the answer is picked up when the socket is readable.

Statements sent with ``prepare=True`` are prepared server-side once per connection (a
named statement per parameter-type signature, as psycopg does) and then only bound and
executed: a claim that carries no writes costs the server about a millisecond of parse
and planning otherwise, which is most of an idle pickup. Preparing costs a round trip of
its own, so a statement is prepared at its second use, not its first: the first claim
after start-up, which idle children wait for, goes out in one round trip. The claim
connection plans its prepared statements once, generically (``plan_cache_mode =
force_generic_plan``, set by ``Database`` when it opens it): left to choose, PostgreSQL
judged the generic plan of a claim carrying writes costlier than a custom one and
planned every execution anew, 0.5 ms of the server's CPU each time. Measured on this
machine (2 vCPU, PostgreSQL 15, one claim of 1 or 16 jobs carrying as many completions,
600 in a row): 1.0-1.05 ms of backend CPU a claim planned each time against 0.65-0.83 ms
generic for one job; 1.87 against 0.93 ms for 16; and with a million jobs waiting 2.0
against 1.13 ms, the generic plan still an index scan (a sequential scan would cost a
hundred times more). Off with
``prepares=False`` (behind a pooler in transaction mode, where a named statement may be
unknown on the next server connection), and off for good on a connection where
preparing failed once.

A generic plan is made from the statistics and the table's size when it is made, and
PostgreSQL makes it again only when the statistics change (``ANALYZE``, ``VACUUM``). A
claim prepared while ``supervisor.jobs`` was small (a fresh database, a supervisor
started before a batch was enqueued) locked and updated its jobs by a sequential scan of
the whole table, and found a batch's next member through ``jobs_batch_idx`` (every member
read): cheap on a small table, and kept as the table grew, until autovacuum analyzed it
(never, on a server without autovacuum), 35 ms a claim at 29,000 rows. So the owner
asks for fresh plans now and then (``discard_plans``): the next prepared statement is
preceded by ``DISCARD PLANS``, which keeps every statement prepared and makes each plan
again at its next use, from the table as it is then.

A statement sent is given ``sent_at`` (monotonic): the owner abandons it when no answer
came within its deadline (``Database.expire``), since a hung server never answers and
never sends the error its ``statement_timeout`` promises.

Only psycopg's public adaptation layer is used (``Transformer`` to dump parameters and
load rows, ``pq`` for the libpq calls).
"""

from __future__ import annotations

import functools
import re
import selectors
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

_PLACEHOLDER = re.compile(r"%\((\w+)\)([sb])")  # %(name)s, or %(name)b: binary

# How a statement's rows come back: given the column names, a maker of one row from its
# values (as psycopg's row factories, but from the names alone).
RowFactory = Callable[[Sequence[str]], Callable[[Sequence[Any]], Any]]


def tuple_rows(names: Sequence[str]) -> Callable[[Sequence[Any]], Any]:
    """Rows as tuples, in column order (the default)."""
    return tuple


class Prepared:
    """A ``%(name)s`` statement turned into libpq's ``$n`` form once, at import. A
    ``%(name)b`` parameter is sent in binary (numeric arrays: no text to escape)."""

    def __init__(self, sql: str) -> None:
        names: list[str] = []
        formats: list[PyFormat] = []

        def number(match: re.Match) -> str:
            name = match.group(1)
            if name not in names:
                names.append(name)
                formats.append(PyFormat.BINARY if match.group(2) == "b" else PyFormat.AUTO)
            return f"${names.index(name) + 1}"

        self.sql = _PLACEHOLDER.sub(number, sql).encode()
        self.names = names
        self.formats = formats

    def values(self, params: Mapping[str, Any]) -> list[Any]:
        """The parameters in ``$n`` order."""
        return [params[name] for name in self.names]


class NonBlockingQuery:
    """Sends a statement, then finishes it from ``handle_event`` calls; the callback
    gets the rows, or the exception (a ``psycopg.Error`` subclass chosen by SQLSTATE)."""

    def __init__(self, conn: psycopg.Connection, selector: selectors.BaseSelector, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.conn = conn
        self.clock = clock
        self.sent_at = 0.0  # when the statement in flight was sent (its prepare included)
        self.pgconn = conn.pgconn
        self.pgconn.nonblocking = 1
        self.selector = selector
        self.fd = self.pgconn.socket
        self.transformer = Transformer(conn)
        self._callback: Callable[[list | Exception], None] | None = None
        self._row_factory: RowFactory = tuple_rows
        self._result: pq.abc.PGresult | None = None
        self._registered = False
        self.prepares = True  # server-side prepared statements allowed on this connection
        self._names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self._sent_once: set[tuple[bytes, tuple[int, ...]]] = set()  # prepared next time
        self._named = 0  # names used on this connection: a name is never reused
        self._discard = False  # DISCARD PLANS before the next prepared statement
        # While a step before the statement is out (its PREPARE, DISCARD PLANS): what to
        # do with that step's result, which sends the statement.
        self._then: Callable[[pq.abc.PGresult | None], None] | None = None

    def discard_plans(self) -> None:
        """Make every prepared statement's plan again, from the tables as they are, at
        its next use (see the module docstring). Costs one round trip, before the next
        prepared statement."""
        self._discard = True

    @property
    def busy(self) -> bool:
        """A statement is in flight."""
        return self._callback is not None

    def send(self, statement: Prepared, params: Mapping[str, Any],
             callback: Callable[[list | Exception], None],
             prepare: bool = False, row_factory: RowFactory = tuple_rows) -> None:
        """Start ``statement``; ``callback`` is called from a later ``handle_event``
        with its rows, each made by ``row_factory`` (tuples unless told). ``prepare``:
        run it as a server-side prepared statement (see the module docstring). Raises
        ``psycopg.OperationalError`` at once if the connection is gone."""
        if self.busy:
            raise RuntimeError("a statement is already in flight")
        values: Sequence[Any] = statement.values(params)
        dumped = self.transformer.dump_sequence(values, statement.formats)
        types, formats = tuple(self.transformer.types or ()), self.transformer.formats
        if prepare and self.prepares:
            key = (statement.sql, types)
            name = self._names.get(key)
            if name is None and key not in self._sent_once:
                self._sent_once.add(key)
                self.pgconn.send_query_params(statement.sql, dumped, param_types=types,
                                              param_formats=formats)
            elif self._discard:
                self._discard = False
                self.pgconn.send_query(b"DISCARD PLANS")
                self._then = functools.partial(self._send_prepared, statement, key,
                                               dumped, formats)
            else:
                self._send_prepared(statement, key, dumped, formats)
        else:
            self.pgconn.send_query_params(statement.sql, dumped, param_types=types,
                                          param_formats=formats)
        events = self._events_to_wait_for()
        self._callback = callback
        self._row_factory = row_factory
        self._result = None
        self.sent_at = self.clock()
        self._watch(events)

    def _events_to_wait_for(self) -> int:
        """Push what was just sent out now: a statement that fits the socket's buffer
        (every one the loop sends) then waits only for its answer, instead of costing
        the loop a wake for the socket's writability first (issue 43: a turn per claim).
        Raises ``psycopg.OperationalError`` if the connection is gone."""
        if self.pgconn.flush() == 0:
            return selectors.EVENT_READ
        return selectors.EVENT_READ | selectors.EVENT_WRITE

    def handle_event(self, key: Any, mask: int) -> None:
        """Push unsent bytes out, read what arrived, and finish when the answer is in."""
        try:
            if mask & selectors.EVENT_WRITE and self.pgconn.flush() == 0:
                self._watch(selectors.EVENT_READ)
            if mask & selectors.EVENT_READ:
                self.pgconn.consume_input()
                while not self.pgconn.is_busy():
                    result = self.pgconn.get_result()
                    if result is None:
                        if self._then is not None:
                            then, self._then = self._then, None
                            done, self._result = self._result, None
                            then(done)
                            self._watch(self._events_to_wait_for())
                        else:
                            self._finish(self._rows_or_error())
                        return
                    self._result = self._result or result
        except psycopg.Error as exc:
            self._then = None
            self._finish(exc)

    def _send_prepared(self, statement: Prepared, key: tuple[bytes, tuple[int, ...]],
                       dumped: Sequence[Any], formats: Sequence[Any] | None,
                       _discarded: pq.abc.PGresult | None = None) -> None:
        """Execute ``statement`` by its name, preparing it first under a new name if
        this connection has none for it. (After ``DISCARD PLANS``, whose result does not
        matter: a server that refused it keeps its plans.)"""
        name = self._names.get(key)
        if name is not None:
            self.pgconn.send_query_prepared(name, dumped, param_formats=formats)
            return
        self._named += 1
        name = f"_supervisor_{self._named}".encode()
        self.pgconn.send_prepare(name, statement.sql, param_types=key[1])
        self._then = functools.partial(self._prepared, statement, key, name, dumped, formats)

    def _prepared(self, statement: Prepared, key: tuple[bytes, tuple[int, ...]], name: bytes,
                  dumped: Sequence[Any], formats: Sequence[Any] | None,
                  result: pq.abc.PGresult | None) -> None:
        """``statement`` was prepared as ``name`` (or refused): execute it."""
        if result is not None and result.status == pq.ExecStatus.COMMAND_OK:
            self._names[key] = name
            self.pgconn.send_query_prepared(name, dumped, param_formats=formats)
        else:  # a server or pooler that will not prepare: send statements as they are
            self.prepares = False
            self.pgconn.send_query_params(statement.sql, dumped, param_types=key[1],
                                          param_formats=formats)

    def abandon(self) -> Callable | None:
        """Forget the statement in flight (its connection is being closed); returns
        its callback so the caller can fail it."""
        self._then = None
        callback, self._callback = self._callback, None
        self._unwatch()
        return callback

    def _rows_or_error(self) -> list | Exception:
        result = self._result
        if result is None:
            return psycopg.OperationalError("no result from the server")
        if result.status == pq.ExecStatus.TUPLES_OK:
            self.transformer.set_pgresult(result)
            names = [(result.fname(i) or b"").decode() for i in range(result.nfields)]
            return self.transformer.load_rows(0, result.ntuples, self._row_factory(names))
        if result.status == pq.ExecStatus.COMMAND_OK:
            return []
        # A prepared statement that failed is prepared afresh next time (the server may
        # have lost it: DISCARD ALL, a pooler, a changed result type after a migration).
        self._names.clear()
        sqlstate = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
        message = (result.error_message or b"").decode("utf-8", "replace").strip()
        try:
            error_class = psycopg.errors.lookup(sqlstate)
        except KeyError:
            error_class = psycopg.DatabaseError
        return error_class(message)

    def _finish(self, outcome: list | Exception) -> None:
        callback, self._callback = self._callback, None
        self._unwatch()
        if callback is not None:
            callback(outcome)

    def _watch(self, events: int) -> None:
        if self._registered:
            self.selector.modify(self.fd, events, data=self)
        else:
            self.selector.register(self.fd, events, data=self)
            self._registered = True

    def _unwatch(self) -> None:
        if self._registered:
            try:
                self.selector.unregister(self.fd)
            except (KeyError, ValueError):
                pass
            self._registered = False

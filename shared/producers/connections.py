"""What ``conn=`` may be, and whether it can take a statement right now.

``conn=`` joins the caller's transaction. It may be a psycopg ``Connection`` (sync API)
or ``AsyncConnection`` (async API), or an ORM's handle on one: Django's connection on its
psycopg 3 backend, a SQLAlchemy ``Connection``/``Session`` or their async twins on the
psycopg driver (see ``shared.producers.orm``). Anything else, a closed connection or one
whose transaction has already failed is refused with one line before a byte is sent.

Running a plan on a cursor lives here too, with the one-line errors every driver shares.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import ConnStatus, TransactionStatus

from shared.db import DatabaseUnavailable, SchemaMissing, UnusableConnection, first_line
from shared.dsn import describe
from shared.fdwait import readable
from shared.producers import orm
from shared.producers.plans import INSERT_NOW, Copy, Plan, Row

_SUPPORTED = ("a psycopg Connection, Django's connection (psycopg 3 backend) or a "
              "SQLAlchemy Connection/Session (postgresql+psycopg)")
_SUPPORTED_ASYNC = ("a psycopg AsyncConnection or a SQLAlchemy AsyncConnection/AsyncSession "
                    "(postgresql+psycopg)")


def sync_connection(conn: Any) -> psycopg.Connection:
    """The psycopg connection behind ``conn``, checked usable; TypeError if unsupported."""
    if isinstance(conn, psycopg.Connection):
        check_usable(conn, "conn")
        return conn
    if isinstance(conn, psycopg.AsyncConnection) or orm.is_async(conn):
        raise TypeError(f"conn is {_name(conn)}, an async connection: "
                        "use enqueue_async()/enqueue_many_async() with it")
    found = orm.sync_driver_connection(conn)
    if found is None:
        raise TypeError(f"conn must be {_SUPPORTED}, not {_name(conn)}")
    raw, label = found
    check_usable(raw, label)
    return raw


async def async_connection(conn: Any) -> psycopg.AsyncConnection:
    """The psycopg async connection behind ``conn``, checked usable."""
    if isinstance(conn, psycopg.AsyncConnection):
        check_usable(conn, "conn")
        return conn
    if isinstance(conn, psycopg.Connection) or orm.sync_kind(conn) is not None:
        raise TypeError(f"conn is {_name(conn)}, a synchronous connection: enqueue_async() "
                        f"needs {_SUPPORTED_ASYNC} (or call enqueue() instead)")
    found = await orm.async_driver_connection(conn)
    if found is None:
        raise TypeError(f"conn must be {_SUPPORTED_ASYNC}, not {_name(conn)}")
    raw, label = found
    check_usable(raw, label)
    return raw


def check_usable(raw: psycopg.Connection | psycopg.AsyncConnection, label: str) -> None:
    """Refuse a closed or broken connection, or one inside a failed transaction."""
    if raw.closed:
        raise UnusableConnection(f"{label} is closed")
    if raw.broken:
        raise UnusableConnection(f"{label} is broken: its link to the server was lost")
    status = raw.pgconn.transaction_status
    if status == TransactionStatus.INERROR:
        raise UnusableConnection(
            f"{label} is inside a failed transaction (an earlier statement raised); "
            "roll it back before enqueueing"
        )
    if status == TransactionStatus.UNKNOWN:
        raise UnusableConnection(f"{label} is broken: its link to the server was lost")


def looks_dead(raw: psycopg.Connection | psycopg.AsyncConnection) -> bool:
    """Whether an idle connection of ours was cut by the server (restart, idle kill,
    failover): closed, broken, or with something to read while it sits idle. Known
    without a round trip, by a poll of the socket, before any statement is sent.

    An idle autocommit session that never LISTENs is sent nothing unasked but the
    server's goodbye (a FATAL message, then EOF), and reading that message does not yet
    show the EOF, so anything readable counts as dead. The rare harmless exception (a
    reported setting changed by a reload) costs one reconnect."""
    pgconn = raw.pgconn  # read libpq's state directly: this runs on every pooled call
    if raw.broken or pgconn.status != ConnStatus.OK:
        return True
    if pgconn.transaction_status != TransactionStatus.IDLE:
        return True
    try:
        return readable([pgconn.socket], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return True


def where(raw: psycopg.Connection | psycopg.AsyncConnection) -> str:
    """``host:port/dbname`` of a connection, for error lines (never the password)."""
    try:
        info = raw.info
        return f"{info.host}:{info.port}/{info.dbname}"
    except Exception:
        return "the database"


def _name(conn: Any) -> str:
    cls = type(conn)
    return f"{cls.__module__}.{cls.__qualname__}"


def drive(cur: psycopg.Cursor, plan: Plan, *, atomic: bool) -> Any:
    """Run ``plan`` on ``cur`` (in a transaction of its own when ``atomic``) and return
    its result; a missing schema or a lost connection becomes one clear line."""
    raw = cur.connection
    try:
        if atomic:
            with raw.transaction():
                return _steps(cur, plan)
        return _steps(cur, plan)
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName) as exc:
        raise missing_schema(exc, cur.connection) from None
    except psycopg.OperationalError as exc:
        if raw.closed or raw.broken:
            raise lost_connection(raw, exc) from None
        raise


def drive_row(cur: psycopg.Cursor, row: Row) -> int:
    """``drive`` for the one plain INSERT of a ``Row``, without a plan's generator: this
    is every lone web request's enqueue, so each microsecond shows in the per-call cost."""
    try:
        cur.execute(INSERT_NOW, row)
        return cur.fetchone()[0]  # type: ignore[index]
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName) as exc:
        raise missing_schema(exc, cur.connection) from None
    except psycopg.OperationalError as exc:
        raw = cur.connection
        if raw.closed or raw.broken:
            raise lost_connection(raw, exc) from None
        raise


def _steps(cur: psycopg.Cursor, plan: Plan) -> Any:
    reply = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            return done.value
        if type(step) is Copy:
            utf8 = cur.connection.info.encoding == "utf-8"
            with cur.copy(step.statement) as copy:
                for chunk in step.chunks:
                    # str is re-encoded by psycopg into a non-UTF-8 client encoding
                    copy.write(chunk if utf8 else chunk.decode())
            reply = None
        else:
            cur.execute(step.query, step.params)
            reply = cur.fetchall()


def missing_schema(exc: psycopg.Error, connection: Any = None) -> SchemaMissing:
    """The one-line error for a database without our schema, naming the database."""
    where = "this database"
    info = getattr(connection, "info", None)
    if info is not None:
        where = f"database {describe(info.dsn)}"
    return SchemaMissing(
        f"the supervisor schema is missing in {where}; run `supervisor migrate` "
        f"({exc.diag.message_primary})"
    )


def lost_connection(raw: Any, exc: BaseException) -> DatabaseUnavailable:
    """The one-line error for a connection lost while a statement was on its way: whether
    the server applied it is unknown (a commit may have been under way)."""
    return DatabaseUnavailable(
        f"lost the connection to PostgreSQL at {where(raw)} during enqueue; "
        f"the job was not confirmed: {first_line(exc)}"
    )

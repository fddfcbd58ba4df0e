"""What ``conn=`` may be, and whether it can take a statement right now.

``conn=`` joins the caller's transaction. It may be a psycopg ``Connection`` (sync API)
or ``AsyncConnection`` (async API), or an ORM's handle on one: Django's connection on its
psycopg 3 backend, a SQLAlchemy ``Connection``/``Session`` or their async twins on the
psycopg driver (see ``shared.producers.orm``). Anything else, a closed connection or one
whose transaction has already failed is refused with one line before a byte is sent.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from psycopg.pq import ConnStatus, TransactionStatus

from shared.db import UnusableConnection
from shared.producers import orm

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
        readable, _, _ = select.select([pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    return bool(readable)


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

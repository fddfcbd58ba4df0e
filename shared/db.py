"""Opening connections, and the one error everyone shows when the database is away.
Connections opened here read timestamps Python cannot hold (``infinity``, past 9999)
as ``OutOfRange`` instead of failing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import psycopg
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader

from shared.dsn import describe, dsn_shape, parse_problem, scrub, unparsed_detail

if TYPE_CHECKING:
    from psycopg.abc import Buffer

DEFAULT_CONNECT_TIMEOUT = 5  # seconds; a dead host should fail fast, not hang a CLI


class DatabaseUnavailable(RuntimeError):
    """The database cannot be reached. The message is one line naming host, port and
    database, never the password."""


class SchemaMissing(RuntimeError):
    """The ``supervisor`` schema is absent or older than this code expects."""


def check_dsn(dsn: str) -> None:
    """Raise ``DatabaseUnavailable`` naming what is wrong with a DSN libpq cannot parse,
    before libpq's own message (which quotes the DSN, password and all) can escape."""
    problem = parse_problem(dsn)
    if problem is not None:
        raise DatabaseUnavailable(f"invalid database DSN: {problem}")


def unavailable(exc: psycopg.Error, dsn: str) -> DatabaseUnavailable:
    """The one-line error for a failed connect, with any password scrubbed out."""
    if isinstance(exc, psycopg.ProgrammingError):  # malformed conninfo check_dsn missed
        return DatabaseUnavailable(f"invalid database DSN: "
                                   f"{unparsed_detail(first_line(exc), dsn)} ({dsn_shape(dsn)})")
    return DatabaseUnavailable(
        f"cannot connect to PostgreSQL at {describe(dsn)}: {scrub(first_line(exc), dsn)}")


class OutOfRange(datetime):
    """A timestamptz Python's datetime cannot hold (``infinity``, ``-infinity``, a year
    past 9999 or before 1), as rows written by plain SQL may carry: read as the nearest
    datetime that exists (so it sorts and compares as it should), with PostgreSQL's own
    text in ``pg_text`` for display."""

    pg_text: str


def out_of_range(text: str) -> OutOfRange:
    """The stand-in for the timestamptz PostgreSQL writes as ``text``."""
    edge = datetime.min if text.startswith("-") or text.endswith(" BC") else datetime.max
    value = OutOfRange(edge.year, edge.month, edge.day, edge.hour, edge.minute, edge.second,
                       edge.microsecond, tzinfo=UTC)
    value.pg_text = text
    return value


def pg_text(value: object) -> str | None:
    """PostgreSQL's text for a timestamp Python cannot hold (see ``OutOfRange``); None
    for any other value."""
    return value.pg_text if isinstance(value, OutOfRange) else None


class _TimestamptzLoader(TimestamptzLoader):
    def load(self, data: Buffer) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:
            return out_of_range(bytes(data).decode())


class _TimestamptzBinaryLoader(TimestamptzBinaryLoader):
    def load(self, data: Buffer) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:
            micros = int.from_bytes(bytes(data), "big", signed=True)
            return out_of_range("-infinity" if micros < 0 else "infinity")


def tolerate_odd_timestamps(conn: psycopg.Connection | psycopg.AsyncConnection) -> None:
    """Read timestamptz values Python cannot hold as ``OutOfRange`` on ``conn``, rather
    than failing the whole query (``timestamp too large``)."""
    conn.adapters.register_loader("timestamptz", _TimestamptzLoader)
    conn.adapters.register_loader("timestamptz", _TimestamptzBinaryLoader)


def connect(
    dsn: str,
    *,
    autocommit: bool = True,
    application_name: str = "supervisor",
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
) -> psycopg.Connection:
    """A psycopg connection to ``dsn`` (autocommit by default). Raises
    ``DatabaseUnavailable`` with a one-line message when the server cannot be reached."""
    check_dsn(dsn)
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, application_name=application_name,
                               connect_timeout=connect_timeout)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        raise unavailable(exc, dsn) from None
    tolerate_odd_timestamps(conn)
    return conn


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's text (libpq messages span several)."""
    for line in str(exc).splitlines():
        line = line.strip()
        if line:
            return line
    return type(exc).__name__


class UnusableConnection(RuntimeError):
    """A connection given as ``conn=`` cannot take a statement now: closed, broken, or
    inside a transaction that has already failed. The message says which."""


async def connect_async(
    dsn: str,
    *,
    autocommit: bool = True,
    application_name: str = "supervisor",
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
) -> psycopg.AsyncConnection:
    """``connect`` for asyncio: a psycopg ``AsyncConnection``, or ``DatabaseUnavailable``."""
    check_dsn(dsn)
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=autocommit, application_name=application_name,
            connect_timeout=connect_timeout)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        raise unavailable(exc, dsn) from None
    tolerate_odd_timestamps(conn)
    return conn

"""Opening connections, and the one error everyone shows when the database is away."""

from __future__ import annotations

import psycopg

from shared.dsn import describe, parse_problem, scrub

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
        return DatabaseUnavailable(f"invalid database DSN: {scrub(first_line(exc), dsn)}")
    return DatabaseUnavailable(
        f"cannot connect to PostgreSQL at {describe(dsn)}: {scrub(first_line(exc), dsn)}")


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
        return psycopg.connect(dsn, autocommit=autocommit, application_name=application_name,
                               connect_timeout=connect_timeout)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        raise unavailable(exc, dsn) from None


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
        return await psycopg.AsyncConnection.connect(
            dsn, autocommit=autocommit, application_name=application_name,
            connect_timeout=connect_timeout)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        raise unavailable(exc, dsn) from None

"""What every subcommand shares: the ``--dsn`` option, opening the database, and turning
known errors into one line ``supervisor: error: ...`` with the right exit code.

A command module uses them like this::

    @click.command("status")
    @dsn_option
    @reports_errors
    def status_command(dsn):
        with open_database(dsn) as conn:
            ...
            raise CliError("queue 'x' does not exist", CLI_USAGE)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
import psycopg

from shared.db import DatabaseUnavailable, SchemaMissing, connect, first_line
from shared.dsn import (
    ENV_DATABASE_URL,
    ENV_DSN,
    EmbeddedUnavailable,
    describe,
    dsn_source,
    is_embedded,
    resolve_dsn,
)
from shared.exitcodes import CLI_ERROR, CLI_USAGE


class CliError(Exception):
    """A problem to report as one line; ``code`` is the exit code (CLI_ERROR for runtime
    trouble, CLI_USAGE for malformed input)."""

    def __init__(self, message: str, code: int = CLI_ERROR) -> None:
        super().__init__(message)
        self.code = code


def dsn_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--dsn`` (passed to the command as ``dsn``, None when not given)."""
    return click.option(
        "--dsn", default=None, metavar="DSN",
        help="Database (default: $SUPERVISOR_DSN, $DATABASE_URL, else an embedded PostgreSQL).",
    )(func)


def fail(message: str, code: int = CLI_ERROR) -> None:
    """Print ``supervisor: error: <message>`` on stderr (a JSON object when the log
    format is JSON) and exit with ``code``."""
    from supervisor.observe import error_line

    click.echo(error_line(message), err=True)
    raise SystemExit(code)


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn known errors raised inside into one-line messages and exit codes; no
    tracebacks for anything a user can cause."""
    try:
        yield
    except CliError as exc:
        fail(str(exc), exc.code)
    except (DatabaseUnavailable, SchemaMissing, EmbeddedUnavailable) as exc:
        fail(str(exc), CLI_ERROR)
    except (TypeError, ValueError) as exc:  # enqueue's validation of user input
        fail(str(exc), CLI_USAGE)
    except psycopg.OperationalError as exc:  # the connection dropped mid-command
        fail(f"database error: {first_line(exc)}", CLI_ERROR)
    except psycopg.Error as exc:
        fail(f"database error: {first_line(exc)}", CLI_ERROR)


def reports_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator form of ``cli_errors`` for a click command function."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with cli_errors():
            return func(*args, **kwargs)

    return wrapper


@contextmanager
def open_database(dsn_value: str | None, *, migrate_embedded: bool = True,
                  check_schema: bool = True,
                  source: str | None = None) -> Iterator[psycopg.Connection]:
    """An autocommit connection to the resolved database. The embedded development
    database is migrated on first use (``migrate_embedded``); any other database must
    have been migrated on purpose, else ``SchemaMissing`` (when ``check_schema``) naming
    the database and where its DSN came from (``source``, default: as ``dsn_value``
    resolves)."""
    from shared.migrate import ensure_schema, migrate

    source = source or dsn_source(dsn_value)
    dsn = resolve_dsn(dsn_value)
    with connect(dsn, application_name="supervisor-cli") as conn:
        if check_schema:
            if migrate_embedded and is_embedded(dsn):
                migrate(conn)
            else:
                try:
                    ensure_schema(conn)
                except SchemaMissing as exc:
                    raise SchemaMissing(schema_missing_message(str(exc), dsn, source)) from None
        yield conn


def schema_missing_message(message: str, dsn: str, source: str) -> str:
    """``message`` prefixed with the database (no password) and where its DSN came
    from; DATABASE_URL gets a hint, since it often belongs to another application."""
    where = f"database {describe(dsn)} (DSN from {source})"
    hint = ""
    if source == ENV_DATABASE_URL:
        hint = (f"; if DATABASE_URL is another application's database, set {ENV_DSN} "
                "or pass --dsn")
    return f"{where}: {message}{hint}"

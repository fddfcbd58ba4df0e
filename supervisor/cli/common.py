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
import signal
import sys
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
    dsn = resolve_cli_dsn(dsn_value)
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


def resolve_cli_dsn(dsn_value: str | None) -> str:
    """``resolve_dsn`` for a command: when it starts or joins the embedded server, stop
    signals release the hold from before the hold is taken (``release_embedded_on_stop``)."""
    if dsn_source(dsn_value) == "embedded":
        release_embedded_on_stop()
    return resolve_dsn(dsn_value)


def schema_missing_message(message: str, dsn: str, source: str) -> str:
    """``message`` prefixed with the database (no password) and where its DSN came
    from; DATABASE_URL gets a hint, since it often belongs to another application."""
    where = f"database {describe(dsn)} (DSN from {source})"
    hint = ""
    if source == ENV_DATABASE_URL:
        hint = (f"; if DATABASE_URL is another application's database, set {ENV_DSN} "
                "or pass --dsn")
    return f"{where}: {message}{hint}"


# Stop signals of a command that holds the embedded server -------------------------------

STOP_EXIT_CODES = {signal.SIGTERM: 0, signal.SIGINT: 130}
_stopping = False


def _exit_quietly(signum: int, frame: object) -> None:
    """A stop signal: leave through ``SystemExit`` (so atexit hooks, the embedded
    server's release among them, run), 0 for SIGTERM and 130 for Ctrl-C, with no
    traceback and no click ``Aborted!``. Later stop signals are ignored, so that they
    cannot cut the release short."""
    global _stopping
    _stopping = True
    for sig in STOP_EXIT_CODES:
        signal.signal(sig, signal.SIG_IGN)
    raise SystemExit(STOP_EXIT_CODES.get(signal.Signals(signum), 0))


def release_embedded_on_stop() -> None:
    """In the ``supervisor`` process itself (not a program importing the CLI), make
    SIGTERM and SIGINT left at their defaults exit quietly through the normal exit, so
    the hold on the embedded server is released; an interpreter killed by SIGTERM's
    default runs no atexit hook and left the server running for ever (issue 47)."""
    from supervisor.cli.early import is_supervisor_command

    if not is_supervisor_command(sys.argv):
        return
    defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}
    for sig, default in defaults.items():
        if signal.getsignal(sig) is default:
            _install(sig, _exit_quietly)


def _install(sig: int, handler: Any) -> bool:
    """Set a signal handler; False off the main thread, where Python refuses it (a
    program that runs a command in a thread keeps its own signals)."""
    try:
        signal.signal(sig, handler)
    except ValueError:
        return False
    return True


@contextmanager
def quiet_stop_signals() -> Iterator[None]:
    """While entered (a long-running command such as the dashboard), SIGTERM exits 0
    and Ctrl-C 130 as ``_exit_quietly`` does; the handlers before are put back on a
    normal return. A server library that takes the signals itself and raises them again
    once it has shut down (uvicorn) ends here too."""
    saved = {sig: signal.getsignal(sig) for sig in STOP_EXIT_CODES}
    if not all(_install(sig, _exit_quietly) for sig in STOP_EXIT_CODES):
        yield  # off the main thread: nothing was installed
        return
    try:
        yield
    finally:
        if not _stopping:
            for sig, handler in saved.items():
                signal.signal(sig, handler)

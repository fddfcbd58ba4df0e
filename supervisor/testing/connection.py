"""The connection the testing helpers work on: the caller's, or one of their own on the
database the environment names (``SUPERVISOR_DSN``, else ``DATABASE_URL``), like every
producer call without ``conn=``."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import make_conninfo

from shared.db import connect
from shared.dsn import ENV_DSN, resolve_dsn
from shared.migrate import ensure_schema

_checked: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()


@contextmanager
def connection(conn: psycopg.Connection | None, dsn: str | None) -> Iterator[psycopg.Connection]:
    """``conn`` itself (never closed, committed or rolled back here), else an autocommit
    connection to ``dsn`` or the environment's database, closed afterwards."""
    if conn is not None:
        yield conn
        return
    own = connect(resolve_dsn(dsn, announce=False), application_name="supervisor-testing")
    try:
        yield own
    finally:
        own.close()


def dsn_of(conn: psycopg.Connection) -> str:
    """A DSN that reaches ``conn``'s database, password included (psycopg leaves it out
    of ``info.dsn``)."""
    info = conn.info
    password = info.password
    return make_conninfo(info.dsn, password=password) if password else info.dsn


@contextmanager
def environment_dsn(dsn: str) -> Iterator[None]:
    """``SUPERVISOR_DSN`` set to ``dsn`` for the block, as ``supervisor run`` sets it for
    its children: a job's ``current_job().batch`` opens its connection from it."""
    before = os.environ.get(ENV_DSN)
    os.environ[ENV_DSN] = dsn
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_DSN, None)
        else:
            os.environ[ENV_DSN] = before


def checked_schema(conn: psycopg.Connection) -> None:
    """Raise ``SchemaMissing`` ("run `supervisor migrate`") unless ``conn``'s database
    holds this code's schema; checked once per connection."""
    if conn not in _checked:
        ensure_schema(conn)
        _checked.add(conn)

"""The dashboard's connections: running the (synchronous) queries of
``supervisor.dashboard.queries`` off the event loop, each on a connection of its own.

Why a connection per request rather than a pool: a page costs one or two queries every
few seconds, and a fresh connection on the same host takes a few milliseconds (see
docs/dashboard.md). In exchange an outage is reported at once (503 with the reason) and
the first request after PostgreSQL comes back succeeds; a pool would hold requests for
its timeout while the database is away and reconnect only on its own backoff after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from starlette.concurrency import run_in_threadpool

from shared.db import DatabaseUnavailable, connect, first_line

T = TypeVar("T")

CONNECT_TIMEOUT = 5  # seconds: a page waits no longer than this for an absent database


class DatabaseDown(Exception):
    """The database did not answer; the message is one line for the page."""


class DashboardDB:
    """Where the dashboard reads and acts: one DSN, a connection per call."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn

    async def run(self, func: Callable[..., T], *args: Any) -> T:
        """``func(conn, *args)`` on a new autocommit connection in a worker thread."""
        return await run_in_threadpool(self._call, func, args)

    def _call(self, func: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            with connect(self._dsn, application_name="supervisor-dashboard",
                         connect_timeout=CONNECT_TIMEOUT) as conn:
                return func(conn, *args)
        except DatabaseUnavailable as exc:
            raise DatabaseDown(str(exc)) from None
        except psycopg.OperationalError as exc:
            raise DatabaseDown(f"database error: {first_line(exc)}") from None

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
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
from starlette.concurrency import run_in_threadpool

from shared.db import DatabaseUnavailable, connect, first_line

T = TypeVar("T")

CONNECT_TIMEOUT = 5  # seconds: a page waits no longer than this for an absent database


class DatabaseDown(Exception):
    """The database did not answer; the message is one line for the page, saying since
    when (``since``, UTC) it has not."""

    def __init__(self, message: str, since: datetime) -> None:
        super().__init__(message)
        self.since = since


class DashboardDB:
    """Where the dashboard reads and acts: one DSN, a connection per call. ``down_since``
    is when the calls started failing (UTC), None while the database answers."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self.down_since: datetime | None = None

    async def run(self, func: Callable[..., T], *args: Any) -> T:
        """``func(conn, *args)`` on a new autocommit connection in a worker thread."""
        return await run_in_threadpool(self._call, func, args)

    def _call(self, func: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            with connect(self._dsn, application_name="supervisor-dashboard",
                         connect_timeout=CONNECT_TIMEOUT) as conn:
                result = func(conn, *args)
        except DatabaseUnavailable as exc:
            raise self._down(str(exc)) from None
        except psycopg.OperationalError as exc:
            raise self._down(f"database error: {first_line(exc)}") from None
        self.down_since = None
        return result

    def _down(self, reason: str) -> DatabaseDown:
        if self.down_since is None:
            self.down_since = datetime.now(UTC)
        since = self.down_since
        return DatabaseDown(f"database unreachable since {since:%Y-%m-%d %H:%M:%S} UTC: "
                            f"{reason}", since)

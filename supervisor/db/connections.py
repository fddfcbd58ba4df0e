"""Opening the parent's connections: bounded statements, dead peers noticed.

The parent's loop enforces its children's deadlines; a statement that hangs, or a socket
whose peer vanished without a FIN, would stall it. Every parent connection therefore
carries a ``statement_timeout`` and TCP keepalives with a user timeout, so a hung server
or a cut network turns into an error within seconds instead of a wedged loop.
"""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

from shared.db import check_dsn, unavailable

CONNECT_TIMEOUT = 2  # seconds; the loop waits for a (re)connect, so keep it short
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,  # seconds of silence before the first probe
    "keepalives_interval": 3,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,  # ms: unacknowledged data this long means the peer is gone
}


def open_connection(dsn: str, name: str, statement_timeout: float) -> psycopg.Connection:
    """An autocommit connection for the parent, named ``name`` in pg_stat_activity.
    ``statement_timeout`` in seconds (0: none). Raises ``DatabaseUnavailable`` with a
    one-line message that never shows the password."""
    check_dsn(dsn)
    try:
        existing = conninfo_to_dict(dsn).get("options") or ""
    except psycopg.ProgrammingError as exc:
        raise unavailable(exc, dsn) from None
    options = f"{existing} -c statement_timeout={int(statement_timeout * 1000)}".strip()
    try:
        return psycopg.connect(dsn, autocommit=True, application_name=name,
                               connect_timeout=CONNECT_TIMEOUT, options=options, **KEEPALIVES)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        raise unavailable(exc, dsn) from None

"""Every way of opening a connection reports a bad DSN in one line, without its password:
the producers' sync and async connects and the supervisor's own connections."""

from __future__ import annotations

import asyncio

import pytest

from shared.db import DatabaseUnavailable, connect, connect_async
from supervisor.db.connections import open_connection

BAD = [
    "postgresql://u:s3cr3tpw@[::1/x",  # unparsable host
    "postgresql://u:s3cr3tpw@h/db?sslmode=%zz",  # a bad % escape
    "postgresql+psycopg2://u:s3cr3tpw@h/db",  # SQLAlchemy's form
    "host=127.0.0.1 port=1 password=s3cr3tpw connect_timeout=1",  # nothing listens there
]


@pytest.mark.parametrize("dsn", BAD)
def test_no_connect_path_shows_the_password(dsn):
    openers = [lambda: connect(dsn, connect_timeout=1),
               lambda: asyncio.run(connect_async(dsn, connect_timeout=1)),
               lambda: open_connection(dsn, "test", 5.0)]
    for opener in openers:
        with pytest.raises(DatabaseUnavailable) as caught:
            opener()
        message = str(caught.value)
        assert "s3cr3tpw" not in message and "\n" not in message, message

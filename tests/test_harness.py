"""The throwaway embedded server can be stopped and started on the same DSN."""

from __future__ import annotations

import psycopg
import pytest

pytestmark = pytest.mark.timeout(90)


@pytest.mark.slow
def test_throwaway_server_restarts_on_the_same_dsn(throwaway_server):
    with psycopg.connect(throwaway_server.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    throwaway_server.stop()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(throwaway_server.dsn, connect_timeout=2)
    throwaway_server.start()
    with psycopg.connect(throwaway_server.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT 2").fetchone() == (2,)
    throwaway_server.restart()
    with psycopg.connect(throwaway_server.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT 3").fetchone() == (3,)

"""The supervisor's /healthz through a real process: bound to loopback by default, 200
while the loop turns and the database answers, 503 with the reason while a private
PostgreSQL is stopped, and 200 again once it is back."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import psycopg
import pytest
from e2e import Supervisor, wait_until

from shared.migrate import migrate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def health(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read().decode()


def test_healthz_follows_the_database(throwaway_server):
    with psycopg.connect(throwaway_server.dsn, autocommit=True) as conn:
        migrate(conn)
    sup = Supervisor(throwaway_server.dsn, "-n", "1", "--metrics-port", "0")
    try:
        sup.wait_for_log("metrics on http://")
        address = re.search(r"metrics on http://([\d.]+):(\d+)/metrics", sup.err)
        assert address and address.group(1) == "127.0.0.1", sup.err
        url = f"http://127.0.0.1:{address.group(2)}/healthz"
        wait_until(lambda: health(url)[0] == 200, what="healthy")
        throwaway_server.stop()
        wait_until(lambda: health(url)[0] == 503, timeout=10, what="503 while the database "
                   "is away")
        assert "database" in health(url)[1]
        throwaway_server.start()
        wait_until(lambda: health(url)[0] == 200, timeout=15, what="200 once it is back")
    finally:
        if not throwaway_server.running:
            throwaway_server.start()
        sup.stop()

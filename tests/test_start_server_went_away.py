"""A server that accepts the supervisor's connections and drops them before start-up is
done (PostgreSQL restarted as the supervisor started, found by the kill storm beside a
held horizon): an outage like any other, not a start-up error that ends the supervisor.
A server that cannot be reached at all is still a one-line error at start."""

from __future__ import annotations

import selectors
import time

import psycopg
import pytest
from e2e import Supervisor, read_log, wait_until

import shared.migrate
from shared.db import DatabaseUnavailable
from shared.enqueue import enqueue
from shared.migrate import migrate
from supervisor.db import Database

pytestmark = pytest.mark.timeout(60)


def _database(dsn: str) -> Database:
    return Database(dsn, "me", 30.0, selectors.DefaultSelector(), statement_timeout=10.0,
                    max_backoff=0.2)


def test_connections_dropped_during_the_schema_check_begin_an_outage_and_check_again(
        dsn, monkeypatch):
    real_check = shared.migrate.ensure_schema
    checks: list[str] = []

    def check_once_dropped(conn: psycopg.Connection) -> int:
        if not checks:
            checks.append("dropped")
            # What a restart does to a backend: "terminating connection due to
            # administrator command".
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        checks.append("checked")
        return real_check(conn)

    monkeypatch.setattr(shared.migrate, "ensure_schema", check_once_dropped)
    db = _database(dsn)
    try:
        db.start(check_schema=True)  # before the change: DatabaseUnavailable
        assert not db.up and db.down_since is not None and db.outages == 1
        deadline = time.monotonic() + 20
        while not db.maybe_reconnect():
            assert time.monotonic() < deadline, "never reconnected"
            for key, mask in db.selector.select(0.05):  # as the arbiter's turn does
                key.data.handle_event(key, mask)
        assert db.up
        assert checks == ["dropped", "checked"], "the schema was not checked again"
        assert db.store.conn is not None
        assert db.store.conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        db.close()


def test_a_server_that_cannot_be_reached_at_start_is_still_an_error():
    db = _database("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    with pytest.raises(DatabaseUnavailable) as raised:
        db.start(check_schema=True)
    assert "127.0.0.1" in str(raised.value) and "\n" not in str(raised.value)
    db.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_restart_during_the_schema_check_of_a_real_start_is_ridden_out(
        throwaway_server, tmp_path):
    """The same, as a real supervisor meets it: its schema check is held on a lock, and
    the server restarts under it (a fast shutdown ends every session). Before the fix
    the supervisor exited 1 at once; now it reconnects, checks the schema then, and
    runs the job that waited."""
    dsn = throwaway_server.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        job = enqueue("e2e_sleep", {"seconds": 0.1}, conn=conn)
    config = tmp_path / "supervisor.toml"
    # Room to see the check blocked and restart the server before it times out.
    config.write_text("statement_timeout = 20\ndatabase_deadline = 30\n")
    log = tmp_path / "run.log"
    holder = psycopg.connect(dsn)
    holder.execute("LOCK TABLE supervisor.migrations IN ACCESS EXCLUSIVE MODE")
    sup = Supervisor(dsn, "-n", "1", "--config", str(config), log_path=log)
    try:
        with psycopg.connect(dsn, autocommit=True) as watcher:
            wait_until(lambda: watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND application_name LIKE 'supervisor %'").fetchone()[0] > 0,
                timeout=30, what="the start's schema check waiting on the lock")
        throwaway_server.restart()  # ends the holder's session and the supervisor's
        sup.wait_for_log("database connection restored", timeout=30)
        wait_until(lambda: any(r["event"] == "end" and r["id"] == job
                               for r in read_log(log)), timeout=30, what="the job to run")
        assert sup.proc.poll() is None, sup.err
    finally:
        holder.close()
        if not throwaway_server.running:
            throwaway_server.start()
        sup.stop()
    assert "database connection lost" in sup.err

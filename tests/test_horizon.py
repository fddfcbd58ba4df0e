"""Who holds the MVCC horizon back (issue 40): named by the database's own views, warned
about by a running supervisor past ``horizon_warn_after``, and shown by the gauges."""

from __future__ import annotations

import logging
import time

import psycopg
import pytest
from e2e import Supervisor, wait_until

from shared.horizon import HorizonHolder, HorizonReport, read_horizon
from supervisor.engine.horizon import REPEAT_EVERY, HorizonWatch
from supervisor.observe import SupervisorMetrics


def _held(dsn: str, application: str) -> psycopg.Connection:
    """A REPEATABLE READ snapshot that read the queue table, left idle: what an
    analytics session or a dump does."""
    holder = psycopg.connect(dsn, application_name=application)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT count(*) FROM supervisor.jobs").fetchone()
    return holder


def test_the_oldest_snapshot_is_named(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert read_horizon(conn).holder is None
        holder = _held(dsn, "nightly-report")
        try:
            report = read_horizon(conn)
        finally:
            holder.close()
        assert report.holder is not None
        assert report.holder.sort == "session"
        assert report.holder.application == "nightly-report"
        assert report.holder.state == "idle in transaction"
        assert "SELECT count(*) FROM supervisor.jobs" in report.holder.query
        assert "pid " in report.holder.describe()
        # The closed session's backend leaves pg_stat_activity a moment after the close.
        wait_until(lambda: read_horizon(conn).holder is None, timeout=10,
                   what="the closed session to leave")


def test_an_xid_holder_is_named_not_the_sessions_whose_snapshots_it_pins(dsn):
    # Every snapshot taken while an xid is held lists it as running, so each of these
    # sessions has it as its xmin: the same age as the holder's own. Connected before
    # the holder, they come first in pg_stat_activity, and the old order named one of
    # them (the warning pointed at a victim, and the passes from an index's start were
    # spaced by a hold of a few seconds, not the real one).
    with psycopg.connect(dsn, autocommit=True) as conn:
        pinned = [psycopg.connect(dsn, application_name=f"victim-{i}") for i in range(4)]
        holder = psycopg.connect(dsn, application_name="left-in-transaction")
        try:
            holder.execute("SELECT txid_current()").fetchone()
            time.sleep(1.1)  # the victims' transactions begin a second later
            for victim in pinned:
                victim.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                victim.execute("SELECT 1").fetchone()
            report = read_horizon(conn)
        finally:
            for victim in pinned:
                victim.close()
            holder.close()
        assert report.holder is not None
        assert report.holder.application == "left-in-transaction", report.holder
        assert report.held_seconds >= 1.0


def test_a_prepared_transaction_is_named(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        (allowed,) = conn.execute("SHOW max_prepared_transactions").fetchone()
        if int(allowed) == 0:
            pytest.skip("max_prepared_transactions is 0 on this server")
        other = psycopg.connect(dsn)
        try:
            other.execute("SELECT 1 FROM supervisor.jobs LIMIT 1")
            other.execute("INSERT INTO supervisor.queues (name) VALUES ('h') "
                          "ON CONFLICT DO NOTHING")
            other.execute("PREPARE TRANSACTION 'horizon-test'")
            report = read_horizon(conn)
            assert report.holder is not None
            assert report.holder.sort == "prepared transaction"
            assert "horizon-test" in report.holder.describe()
        finally:
            other.close()
            conn.execute("ROLLBACK PREPARED 'horizon-test'")


def _report(seconds: float | None, pid: int = 7, sort: str = "session",
            state: str = "idle in transaction") -> HorizonReport:
    holder = HorizonHolder(sort, pid, "app", "role", state, seconds, None, "SELECT 1", 42)
    return HorizonReport(holder, 1000, 10)


def test_the_watch_warns_once_per_holder_and_says_when_it_lets_go(caplog):
    metrics = SupervisorMetrics("me", version="test")
    watch = HorizonWatch(60.0, metrics)
    caplog.set_level(logging.INFO, logger="supervisor.horizon")
    watch.looked(_report(10), 0.0)
    assert not caplog.records  # below the threshold
    watch.looked(_report(70), 30.0)
    watch.looked(_report(100), 60.0)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "pid 7" in warnings[0].getMessage()
    watch.looked(_report(100 + REPEAT_EVERY), 30.0 + REPEAT_EVERY)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
    watch.looked(HorizonReport(None, 5, 10), 700.0)
    assert "no longer held" in caplog.records[-1].getMessage()
    assert b"supervisor_db_horizon_age_seconds 0" in metrics.render()


def test_an_inactive_slot_is_warned_about_without_a_clock(caplog):
    watch = HorizonWatch(60.0)
    caplog.set_level(logging.WARNING, logger="supervisor.horizon")
    watch.looked(_report(None, pid=0, sort="replication slot", state="active"), 0.0)
    assert not caplog.records
    watch.looked(_report(None, pid=0, sort="replication slot", state="inactive"), 1.0)
    assert "replication slot" in caplog.records[-1].getMessage()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_running_supervisor_names_the_holder(dsn, tmp_path):
    config = tmp_path / "supervisor.toml"
    config.write_text("horizon_warn_after = 0.5\n")
    holder = _held(dsn, "nightly-report")
    time.sleep(0.6)  # the snapshot's age passes the threshold before the first look
    sup = Supervisor(dsn, "-n", "1", "--config", str(config))
    try:
        sup.wait_for_log("the MVCC horizon is held", timeout=30)
        assert "application 'nightly-report'" in sup.err
        assert "idle in transaction" in sup.err
    finally:
        sup.stop()
        holder.close()


def test_status_names_a_long_hold(dsn):
    import subprocess
    import sys

    from e2e import ROOT, TESTS_DIR

    from supervisor.admin import describe_horizon, horizon

    holder = _held(dsn, "nightly-report")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            found = horizon(conn)
        assert found["holder"]["application"] == "nightly-report"
        assert not found["notable"]  # seconds old: ordinary work, not news
        assert describe_horizon(found) is None
        long_held = found | {"held_seconds": 4000.0, "notable": True}
        line = describe_horizon(long_held)
        assert line is not None and "held for 4000 s" in line and "nightly-report" in line
        env = {"SUPERVISOR_DSN": dsn, "PYTHONPATH": f"{TESTS_DIR}:{ROOT}", "PATH": "/usr/bin"}
        out = subprocess.run([sys.executable, "-m", "supervisor", "status", "--json"],
                             env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert '"nightly-report"' in out.stdout
    finally:
        holder.close()

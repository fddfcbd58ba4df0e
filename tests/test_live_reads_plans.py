"""What the supervisor reads about jobs in flight costs what is in flight, not the
table: on a table that keeps days of finished jobs (the default retention is a week),
the burst's progress counts, the burst's closing look for unhandled kinds, the
leader's per-minute depth sample, the dashboard's counts of kinds in flight and the
counts in flight of ``supervisor status``, the dashboard and ``/metrics`` are read
through the partial indexes of their states (``shared.live_sql``).

Each was one ``state IN (...)`` that no index's predicate matched, so each read the
whole table: after a 15-minute held horizon at 1,000 jobs/s the depth sample took longer
than its 250 ms budget every minute, and no minute was sampled (docs/reliability.md,
issue 40). The plans are read with ``EXPLAIN`` on a table of finished jobs beside a
few live ones; the counts themselves are checked against the table."""

from __future__ import annotations

import pytest

from supervisor.admin.pages import _KINDS_LIVE
from supervisor.admin.status import _LIVE_COUNTS
from supervisor.dashboard.detail import _KIND_LIVE
from supervisor.db import sql
from supervisor.db.history import SAMPLE, sample_depth
from supervisor.db.store import Store

pytestmark = pytest.mark.timeout(120)

FINISHED = 50_000


@pytest.fixture()
def history(conn):
    """A table of ``FINISHED`` completed jobs and a few live ones, analyzed."""
    conn.execute(
        "INSERT INTO supervisor.jobs (kind, queue, state, attempt, attempted_at, finished_at) "
        "SELECT 'k', 'q' || (g %% 3), 'completed', 1, now() - interval '1 hour', "
        "now() - interval '1 hour' + g * interval '1 ms' "
        "FROM generate_series(1, %s) AS g", (FINISHED,))
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, run_at) VALUES "
                 "('k', 'q0', now() - interval '5 minutes'), ('k', 'q1', now()), "
                 "('gone', 'q1', now())")
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, run_at) VALUES "
                 "('k', 'q0', 'scheduled', now() + interval '1 hour'), "
                 "('gone', 'q2', 'retryable', now() + interval '1 minute')")
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, attempt, lease_owner, "
                 "lease_expires_at) VALUES ('k', 'q2', 'running', 1, 'me', "
                 "now() + interval '30 seconds')")
    conn.execute("ANALYZE supervisor.jobs")
    return conn


def plan_of(conn, statement: str, params: dict) -> str:
    return "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, params))


QUEUES = {"queues": ["q0", "q1", "q2"], "kinds": ["k"]}


@pytest.mark.parametrize("name, statement", [
    ("progress counts", sql.QUEUE_COUNTS),
    ("unhandled kinds", sql.UNHANDLED_WAITING),
    ("depth sample", SAMPLE),
    ("dashboard: kinds in flight", _KINDS_LIVE),
    ("status, dashboard and /metrics: counts in flight", _LIVE_COUNTS),
    ("dashboard: a kind in flight", _KIND_LIVE),
])
def test_reads_of_jobs_in_flight_never_scan_the_finished_ones(history, name, statement):
    plan = plan_of(history, statement, {**QUEUES, "keep": 86400.0, "kind": "k"})
    assert "Seq Scan on jobs" not in plan, f"{name}:\n{plan}"


def test_the_counts_read_through_the_indexes_are_the_tables(history):
    counts = Store(history, "me").queue_counts(["q0", "q1", "q2"])
    assert counts["q0"] == {"available": 1, "scheduled": 1, "retryable": 0, "running": 0,
                            "due": 1}
    assert counts["q1"] == {"available": 2, "scheduled": 0, "retryable": 0, "running": 0,
                            "due": 2}
    assert counts["q2"] == {"available": 0, "scheduled": 0, "retryable": 1, "running": 1,
                            "due": 0}
    unhandled = history.execute(sql.UNHANDLED_WAITING, QUEUES).fetchall()
    assert unhandled == [("gone", 2)]
    kinds = sorted(history.execute(_KINDS_LIVE).fetchall())
    assert kinds == [("gone", "available", 1), ("gone", "retryable", 1),
                     ("k", "available", 2), ("k", "running", 1), ("k", "scheduled", 1)]
    assert dict(history.execute(_KIND_LIVE, {"kind": "k"}).fetchall()) == {
        "available": 2, "running": 1, "scheduled": 1}
    assert sorted(history.execute(_LIVE_COUNTS).fetchall()) == [
        ("q0", "available", 1), ("q0", "scheduled", 1), ("q1", "available", 2),
        ("q2", "retryable", 1), ("q2", "running", 1)]


def test_the_depth_sample_counts_what_is_in_flight_and_reads_no_job_twice_a_minute(history):
    assert sample_depth(history) == 3
    rows = history.execute("SELECT queue, available, running, oldest_wait "
                           "FROM supervisor.queue_minutes ORDER BY queue").fetchall()
    assert [r[:3] for r in rows] == [("q0", 1, 0), ("q1", 2, 0), ("q2", 0, 1)]
    assert 290 <= rows[0][3] < 400
    # Sampled this minute: the one-time filter keeps the next round off the jobs. (A
    # minute that turns between the two statements samples anew: then again.)
    for _ in range(3):
        sample_depth(history)
        analyzed = "\n".join(r[0] for r in history.execute(
            "EXPLAIN (ANALYZE, COSTS OFF) " + SAMPLE, {"keep": 86400.0}))
        scans = [line for line in analyzed.splitlines() if "on jobs" in line]
        if scans and all("never executed" in line for line in scans):
            break
    else:
        pytest.fail(analyzed)

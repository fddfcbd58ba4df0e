"""Issue 50: ``/jobs`` with 20,000 distinct queue names and none of the optional indexes.

The filter form's list of queue names skipped through an index on (state, queue), one
probe per pair; without that index (docs/dashboard.md leaves it to the operator) every
probe read the table: 82 s for the page. Now the names come from one pass over the
table unless such an index exists and the planner's estimates give many rows per pair
(counted here as scans of ``supervisor.jobs`` in the transaction, not timed), and past
``QUEUE_CHOICES`` names the form shows a text box instead of a list of 20,000 options.
"""

from __future__ import annotations

import urllib.request

import psycopg
import pytest
from dashboard_seed import DashboardProcess

from supervisor.dashboard import queries

pytestmark = pytest.mark.timeout(120)

QUEUES = 20_000
PASS_SCANS = 4  # one pass, or a parallel one: a scan for each of its (default) 3 workers


@pytest.fixture
def many_queues(dsn):
    """20,000 queues with two jobs each (in two states), three named only in
    ``supervisor.queues``; no optional index."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO supervisor.jobs (kind, queue, state) SELECT 'k', "
            "'q' || lpad((g %% %(n)s)::text, 5, '0'), "
            "CASE WHEN g < %(n)s THEN 'available' ELSE 'completed' END "
            "FROM generate_series(0, 2 * %(n)s - 1) g", {"n": QUEUES})
        conn.execute("INSERT INTO supervisor.queues (name) VALUES ('zz1'), ('zz2'), ('zz3')")
        conn.execute("ANALYZE supervisor.jobs")
    return dsn


def _scans_of_jobs(conn: psycopg.Connection, limit: int) -> tuple[list[str], int]:
    """``queue_names`` in a transaction of its own, and how many scans of
    ``supervisor.jobs`` it started: sequential ones, and those of an index on (state,
    queue) where there is one (a probe each)."""
    with conn.transaction():
        names = queries.queue_names(conn, limit=limit)
        scans = conn.execute(
            "SELECT pg_stat_get_xact_numscans('supervisor.jobs'::regclass) + coalesce("
            "pg_stat_get_xact_numscans(to_regclass('supervisor.jobs_state_queue_idx')), 0)"
        ).fetchone()[0]
    return names, scans


def test_queue_names_take_one_pass_without_the_index(many_queues):
    expected = sorted([f"q{i:05d}" for i in range(QUEUES)] + ["zz1", "zz2", "zz3"])
    with psycopg.connect(many_queues, autocommit=True) as conn:
        names, scans = _scans_of_jobs(conn, limit=QUEUES + 10)
        assert names == expected
        assert scans <= PASS_SCANS, scans  # the old skip: one per pair, 40,001
        assert queries.queue_names(conn, limit=5) == expected[:5]
        # With the optional index but two rows per (state, queue) pair, 40,000 probes
        # would cost more than the pass: still one pass.
        conn.execute("CREATE INDEX jobs_state_queue_idx ON supervisor.jobs (state, queue)")
        conn.execute("ANALYZE supervisor.jobs")
        names, scans = _scans_of_jobs(conn, limit=QUEUES + 10)
        assert names == expected
        assert scans <= PASS_SCANS, scans


def test_few_queues_over_many_rows_skip_through_the_index(dsn):
    """Where there are many rows per (state, queue) pair and the index exists, the names
    come from one probe per pair, not a pass (and are the same)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO supervisor.jobs (kind, queue, state) SELECT 'k', 'q' || (g % 10), "
            "CASE WHEN g % 2 = 0 THEN 'available' ELSE 'completed' END "
            "FROM generate_series(1, 40000) g")
        conn.execute("CREATE INDEX jobs_state_queue_idx ON supervisor.jobs (state, queue)")
        conn.execute("ANALYZE supervisor.jobs")
        names, scans = _scans_of_jobs(conn, limit=100)
        assert names == [f"q{i}" for i in range(10)]
        assert scans > PASS_SCANS, scans  # a probe per (state, queue) pair: the index path


def test_the_jobs_page_offers_a_text_box_past_the_choices(many_queues):
    server = DashboardProcess(many_queues, None)
    try:
        with urllib.request.urlopen(server.url + "/jobs?queue=q00042", timeout=60) as page:
            html = page.read().decode()
    finally:
        server.close()
    assert html.count("<option") < 50  # the states' options only
    assert '<input name="queue" value="q00042"' in html
    assert f"over {queries.QUEUE_CHOICES} queues" in html

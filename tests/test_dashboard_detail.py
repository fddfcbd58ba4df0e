"""One queue's page and one kind's page, through plain HTTP against a real
``supervisor dashboard`` over a real seeded database: their figures, the charts per
minute over the last hour and per hour over the last day (drawn from the rollup
tables, not the jobs), the queue's depth and oldest wait, their JSON twins, and
unknown names."""

from __future__ import annotations

import urllib.parse

import psycopg
import pytest
from test_dashboard_http import api, call

from supervisor import admin
from supervisor.db.history import sample_depth

pytestmark = pytest.mark.timeout(60)
pytest_plugins = ["dashboard_fixtures"]  # pages

_MINUTE = """
INSERT INTO supervisor.job_minutes (minute, queue, kind, completed, discarded, retried,
                                    run_sum, run_n, run_p95, wait_sum, wait_n,
                                    cpu_seconds, max_rss_bytes)
VALUES (date_trunc('minute', now()) - %s * interval '1 minute', %s, %s, %s, %s, 0,
        %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT DO NOTHING
"""


def _closed_hours(dsn) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT sum(completed) FROM supervisor.job_minutes "
                            "WHERE queue = 'odd/queue' "
                            "AND minute < date_trunc('hour', now())").fetchone()[0]


@pytest.fixture(scope="module")
def history(pages):
    server, dsn, _ids = pages
    with psycopg.connect(dsn, autocommit=True) as conn:
        # odd/queue: 42 done and 3 failed five minutes ago, 100 done five hours ago.
        # resize: 63 CPU seconds and 300 MiB at most then, 40 s and 200 MiB then.
        conn.execute(_MINUTE, (5, "odd/queue", "resize", 42, 3, 84.0, 42, 3.5, 42.0, 42,
                               63.0, 300 << 20))
        conn.execute(_MINUTE, (300, "odd/queue", "resize", 100, 0, 100.0, 100, 1.5,
                               0.0, 100, 40.0, 200 << 20))
        # thumbs: finished jobs without a usage (nothing measured: no CPU, not zero).
        conn.execute(_MINUTE, (7, "odd/queue", "thumbs", 5, 0, 5.0, 5, 1.0, 0.0, 5,
                               None, None))
        # resize's recent jobs, measured: 1.0, 2.0 ... 10.0 CPU seconds, 1..10 MiB.
        conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, attempt, "
                     "attempted_at, finished_at, usage) "
                     "SELECT 'resize', 'odd/queue', 'completed', 1, now() - interval "
                     "'10 minutes', now() - interval '9 minutes', jsonb_build_object("
                     "'cpu_seconds', g::float8, 'wall_seconds', g + 1.0, "
                     "'max_rss_bytes', g << 20) FROM generate_series(1, 10) AS g")
        conn.execute("INSERT INTO supervisor.queue_minutes (minute, queue, available, "
                     "running, oldest_wait) VALUES (date_trunc('minute', now()) - "
                     "interval '3 minutes', 'odd/queue', 17, 2, 900)")
        conn.execute("INSERT INTO supervisor.jobs (kind, queue) VALUES ('resize', 'odd/queue')")
    return server, dsn


def test_a_queue_page_charts_its_hour_and_day_and_its_depth(history):
    server, dsn = history
    name = urllib.parse.quote("odd/queue", safe="")
    status, data = api(server, f"/api/queues/{name}")
    assert status == 200 and data["queue"]["name"] == "odd/queue"
    hour, day = data["history"]["hour"], data["history"]["day"]
    assert len(hour) == 60 and len(day) == 24
    assert sorted(m["completed"] for m in hour if m["completed"]) == [5, 42]
    assert sum(m["failed"] for m in hour) == 3
    # The day ends with the last closed hour: the five hours ago, and the hour's
    # minutes when they fell before this hour began.
    assert sum(h["completed"] for h in day) == _closed_hours(dsn)
    assert max(h["run_p95"] or 0 for h in hour) == 3.5 and 1.5 in [h["run_p95"] for h in day]
    minute = next(m for m in hour if m["completed"] == 42)
    assert minute["run_mean"] == pytest.approx(2.0) and minute["wait_mean"] == 1.0
    depth = data["depth"]["hour"]
    assert max(d["available"] for d in depth) == 17 and max(d["running"] for d in depth) == 2
    assert max(d["oldest_wait"] or 0 for d in depth) == 900
    kinds = {k["name"]: k for k in data["kinds"]}
    assert kinds["resize"]["completed"] == 142 and kinds["resize"]["failed"] == 3
    assert kinds["resize"]["failure_rate"] == pytest.approx(3 / 145)
    assert kinds["resize"]["cpu_seconds"] == pytest.approx(103.0)
    assert kinds["resize"]["max_rss_bytes"] == 300 << 20
    assert kinds["thumbs"]["cpu_seconds"] is None  # unmeasured, not free
    assert sorted(m["cpu_seconds"] for m in hour if m["cpu_seconds"]) == [63.0]
    # A minute without jobs cost nothing; one whose jobs were not measured is a gap.
    assert [m["cpu_seconds"] for m in hour if m["completed"] == 5] == [None]
    assert sum(1 for m in hour if m["cpu_seconds"] == 0) >= 50

    status, headers, body = call(server.url + f"/queues/{name}")
    assert status == 200
    for chart in ("finished-hour", "finished-day", "times-hour", "times-day",
                  "depth-hour", "depth-day", "oldest-hour", "oldest-day"):
        assert f'id="chart-{chart}"><figcaption>'.encode() in body, chart
    assert body.count(b'<svg class="chart"') == 10
    assert b'id="chart-cpu-hour"' in body and b'id="chart-cpu-day"' in body
    assert b"completed 47" in body  # the hour
    assert f"completed {_closed_hours(dsn)}".encode() in body  # the day
    assert b"available max 17" in body and b"oldest wait max 15.0m" in body
    assert b'href="/kinds/resize"' in body
    assert body.count(b"<script") == 1  # the page's own script; the charts have none
    assert "script-src 'self'" in headers["content-security-policy"]


def test_a_kind_page_charts_its_hour_and_day_across_queues(history):
    server, _dsn = history
    status, data = api(server, "/api/kinds/resize")
    assert status == 200 and data["kind"] == "resize"
    assert data["day"]["completed"] == 142 and data["day"]["failed"] == 3
    assert data["counts"]["available"] >= 1
    assert {q["name"] for q in data["queues"]} == {"odd/queue"}
    assert sum(m["completed"] for m in data["history"]["hour"]) == 42  # thumbs not
    assert data["day"]["cpu_seconds"] == pytest.approx(103.0)
    assert data["day"]["max_rss_bytes"] == 300 << 20
    # The ten measured jobs: percentile_cont over 1..10.
    assert data["usage"]["cpu_seconds"] == pytest.approx({"p50": 5.5, "p95": 9.55})
    assert data["usage"]["max_rss_bytes"] == {"p50": round(5.5 * 2**20),
                                              "p95": round(9.55 * 2**20)}
    assert [m["cpu_seconds"] for m in data["history"]["hour"] if m["completed"]] == [63.0]
    status, _, body = call(server.url + "/kinds/resize")
    assert status == 200 and b"completed 42" in body
    assert b'href="/queues/odd%2Fqueue"' in body
    assert b'id="chart-cpu-hour"' in body and b'id="chart-cpu-day"' in body
    assert b'class="legend-cpu_seconds"' in body and b"CPU 1.1m" in body  # 63 s
    usage = body.split(b'id="kind-usage"', 1)[1].split(b"</table>", 1)[0]
    assert b"p50 5.5s, p95 9.5s" in usage and b"(1m 43s in 24 h)" in usage
    assert b"p50 5.5 MiB" in usage and b"largest 300 MiB" in usage


def test_unknown_queues_and_kinds_are_404_and_the_lists_link_to_their_pages(history):
    server, _dsn = history
    assert api(server, "/api/queues/no-such-queue")[0] == 404
    assert api(server, "/api/kinds/no-such-kind")[0] == 404
    status, _, body = call(server.url + "/kinds/no%00such")
    assert status in (400, 404) and b"Traceback" not in body
    _, _, body = call(server.url + "/")
    assert b'href="/queues/odd%2Fqueue"' in body
    _, _, body = call(server.url + "/kinds")
    assert b'href="/kinds/resize"' in body
    status, data = api(server, "/api/kinds")
    resize = next(k for k in data["kinds"] if k["kind"] == "resize")
    assert resize["cpu_seconds"] == pytest.approx({"p50": 5.5, "p95": 9.55})
    row = body.split(b'data-kind="resize"', 1)[1].split(b"</tr>", 1)[0]
    assert b"5.5s" in row and b"9.5s" in row and b"5.5 MiB" in row


def test_the_leader_samples_each_queue_depth_once_a_minute(conn):
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, run_at) VALUES "
                 "('k', 'a', now() - interval '10 minutes'), ('k', 'a', now()), "
                 "('k', 'b', now())")
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, attempt) "
                 "VALUES ('k', 'b', 'running', 1)")
    conn.execute("INSERT INTO supervisor.queue_minutes (minute, queue) "
                 "VALUES (now() - interval '31 days', 'gone')")
    assert sample_depth(conn) == 2
    assert sample_depth(conn) == 0  # this minute has its sample
    rows = conn.execute("SELECT queue, available, running, oldest_wait "
                        "FROM supervisor.queue_minutes ORDER BY queue").fetchall()
    assert [r[:3] for r in rows] == [("a", 2, 0), ("b", 1, 1)]
    assert 590 <= rows[0][3] < 700 and rows[1][3] < 60


def test_a_depth_too_slow_to_count_is_skipped_not_waited_for(conn, dsn):
    conn.execute("INSERT INTO supervisor.jobs (kind, queue) "
                 "SELECT 'k', 'q' || (g % 3) FROM generate_series(1, 30) AS g")
    # Another session holds the table: the count cannot start, and the leader gives up
    # after its budget instead of waiting; nothing is written, the connection is fine.
    with psycopg.connect(dsn) as other:
        other.execute("LOCK TABLE supervisor.jobs IN ACCESS EXCLUSIVE MODE")
        assert sample_depth(conn, timeout_ms=200) == 0
    assert conn.execute("SELECT count(*) FROM supervisor.queue_minutes").fetchone()[0] == 0
    assert sample_depth(conn) == 3


def test_a_hand_written_usage_leaves_the_kind_percentiles_standing(conn):
    """A usage that is not a measure (text, past float8, negative) is left out of the
    kinds page's CPU and memory percentiles instead of failing the page."""
    conn.execute("""
        INSERT INTO supervisor.jobs (kind, queue, state, attempt, finished_at, usage)
        SELECT 'k', 'q', 'completed', 1, now() - interval '1 minute', u::jsonb
        FROM unnest(ARRAY['{"cpu_seconds": "lots", "max_rss_bytes": 1e400}',
                          '{"cpu_seconds": -3, "max_rss_bytes": -1}', '[1]',
                          '{"cpu_seconds": 1, "max_rss_bytes": 1024}',
                          '{"cpu_seconds": 3, "max_rss_bytes": 3072}']) AS u""")
    kinds = {k["kind"]: k for k in admin.pages.kinds(conn)}
    assert kinds["k"]["cpu_seconds"] == {"p50": 2.0, "p95": pytest.approx(2.9)}
    assert kinds["k"]["max_rss_bytes"] == {"p50": 2048, "p95": 2970}
    assert kinds["k"]["counts"]["completed"] == 5


def test_the_overview_charts_the_last_day_outside_what_a_refresh_replaces(history):
    server, dsn = history
    status, _headers, body = call(server.url + "/")
    assert status == 200
    assert b'aria-label="Jobs finished per minute, last hour"' in body
    assert b'id="chart-day"><svg class="chart"' in body
    assert b'aria-label="Jobs finished per hour, last day"' in body
    # Drawn below the live part, so an open tab's refresh neither replaces nor re-reads it.
    assert body.index(b'id="chart-day"') > body.index(b"</main>")
    with psycopg.connect(dsn, autocommit=True) as conn:
        closed = conn.execute("SELECT sum(completed) FROM supervisor.job_minutes "
                              "WHERE minute < date_trunc('hour', now())").fetchone()[0]
    assert f"completed {closed}".encode() in body.split(b'id="chart-day"')[1]
    status, _headers, body = call(server.url + "/", headers={"x-dashboard-refresh": "1"})
    assert status == 200
    assert b'id="chart-hour"' in body and b'id="chart-day"' not in body

"""The dashboard's job page shows each attempt's cost and output beside its traceback,
escaped, and a running job busy in native code; the supervisors page lists such
children (issues 26 and 29). A real dashboard process over a database of its own."""

from __future__ import annotations

import urllib.request

import orjson
import pgharness
import psycopg
import pytest
from dashboard_seed import XSS, DashboardProcess
from markupsafe import escape

pytestmark = pytest.mark.timeout(60)

USAGE = {"cpu_seconds": 1.25, "wall_seconds": 2.5, "max_rss_bytes": 300 << 20}


@pytest.fixture(scope="module")
def dashboard(pg_base_dsn, _migrated_template):
    name = pgharness.unique_name("supervisor_cost")
    dsn = pgharness.create_database(pg_base_dsn, name, template=_migrated_template)
    with psycopg.connect(dsn, autocommit=True) as conn:
        entry = {"attempt": 1, "kind": "error", "message": "ValueError: no",
                 "traceback": "Traceback (most recent call last):\nValueError: no",
                 "at": "2026-12-02T01:00:00+00:00", "supervisor": "h:1:x",
                 "usage": USAGE, "output": f"first attempt printed {XSS}\n"}
        failed = conn.execute(
            "INSERT INTO supervisor.jobs (kind, queue, state, attempt, max_attempts, errors,"
            " usage, output, finished_at) VALUES ('resize', 'default', 'discarded', 1, 1,"
            " %s, %s, %s, now()) RETURNING id",
            (orjson.dumps([entry]).decode(), orjson.dumps(USAGE).decode(),
             f"last attempt printed {XSS}\n")).fetchone()[0]
        running = conn.execute(
            "INSERT INTO supervisor.jobs (kind, queue, state, attempt, lease_owner,"
            " attempted_at) VALUES ('fit', 'default', 'running', 1, 'h:1:x', now())"
            " RETURNING id").fetchone()[0]
        native = [{"pid": 5121, "worker": 1, "job": running, "kind": "fit", "seconds": 12.5}]
        conn.execute(
            "INSERT INTO supervisor.supervisors (id, host, pid, queues, children, busy, info,"
            " heartbeat_at) VALUES ('h:1:x', 'h', 1, '{default}', 2, 1, %s, now())",
            (orjson.dumps({"kinds": ["fit"], "native": native}).decode(),))
    server = DashboardProcess(dsn, None)
    try:
        yield server, failed, running
    finally:
        server.close()
        pgharness.drop_database(pg_base_dsn, name)


def page(server, path: str) -> str:
    with urllib.request.urlopen(server.url + path, timeout=10) as response:
        return response.read().decode()


def test_a_failed_attempt_shows_its_cost_and_output_escaped(dashboard):
    server, failed, _ = dashboard
    text = page(server, f"/jobs/{failed}")
    assert XSS not in text
    assert f"last attempt printed {escape(XSS)}" in text
    assert f"first attempt printed {escape(XSS)}" in text
    assert text.count("wall 2.50 s, CPU 1.25 s, peak 300 MiB") == 2  # the job, the entry
    assert text.count("<script") == 1  # the page's own


def test_a_job_busy_in_native_code_says_so(dashboard):
    server, _, running = dashboard
    assert "busy in native code: no heartbeat for 12.5 s" in page(server, f"/jobs/{running}")
    text = page(server, "/supervisors")
    assert f"busy in native code: <a href=\"/jobs/{running}\">job {running}</a> fit" in text

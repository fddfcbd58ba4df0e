"""Bulk actions on the jobs matching a filter, through a real ``supervisor dashboard``
over a real database: counted first, then done on at most the confirmed number, in
batches; refused without the token; a filter matching nothing changes nothing; unique
keys are respected; bad input is a 400."""

from __future__ import annotations

import psycopg
import pytest
from dashboard_seed import TOKEN, DashboardProcess
from test_dashboard_http import api, call

from supervisor.admin import bulk

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]  # a dashboard per test
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def add(conn, n: int, state: str, kind: str = "flaky", queue: str = "imports",
        unique_key: str | None = None) -> list[int]:
    return [row[0] for row in conn.execute(
        "INSERT INTO supervisor.jobs (kind, queue, state, attempt, finished_at, unique_key, "
        "errors) SELECT %s, %s, %s, 5, CASE WHEN %s IN ('completed', 'discarded', "
        "'cancelled') THEN now() END, %s, '[{\"message\": \"boom\"}]' "
        "FROM generate_series(1, %s) RETURNING id",
        (kind, queue, state, state, unique_key, n)).fetchall()]


def states(conn, ids: list[int]) -> dict[str, int]:
    return dict(conn.execute("SELECT state, count(*) FROM supervisor.jobs WHERE id = ANY(%s) "
                             "GROUP BY state", (ids,)).fetchall())


@pytest.fixture
def server(dsn):
    proc = DashboardProcess(dsn, TOKEN, refresh=0)
    try:
        yield proc
    finally:
        proc.close()


def test_count_then_retry_at_most_the_confirmed_number_in_batches(server, conn):
    discarded = add(conn, 2500, "discarded")
    other_kind = add(conn, 5, "discarded", kind="steady")
    completed = add(conn, 3, "completed")
    status, data = api(server, "/api/jobs/bulk/retry?kind=flaky&state=discarded")
    assert status == 200 and data["matching"] == 2500 and data["cap"] == bulk.CAP
    # The operator confirmed 2,000: the 2,000 oldest are retried, not one more.
    status, data = api(server, "/api/jobs/bulk/retry?kind=flaky&state=discarded&expect=2000",
                       method="POST", headers=BEARER)
    assert status == 200 and data == {"action": "retry", "changed": 2000, "skipped": 0}
    assert states(conn, discarded[:2000]) == {"available": 2000}
    assert states(conn, discarded[2000:]) == {"discarded": 500}
    assert states(conn, other_kind) == {"discarded": 5}
    assert states(conn, completed) == {"completed": 3}  # retry never re-runs completed jobs


def test_a_filter_matching_nothing_says_so_and_changes_nothing(server, conn):
    ids = add(conn, 3, "discarded")
    status, data = api(server, "/api/jobs/bulk/retry?kind=nothing-like-it")
    assert status == 200 and data["matching"] == 0
    status, data = api(server, "/api/jobs/bulk/retry?kind=nothing-like-it&expect=5",
                       method="POST", headers=BEARER)
    assert status == 200 and data == {"action": "retry", "changed": 0, "skipped": 0}
    status, _, body = call(server.url + "/jobs/bulk/retry?kind=nothing-like-it")
    assert status == 200 and b'id="bulk-none"' in body and b"bulk-form" not in body
    assert states(conn, ids) == {"discarded": 3}


def test_bulk_actions_need_the_token(server, conn):
    ids = add(conn, 3, "discarded")
    status, data = api(server, "/api/jobs/bulk/retry?expect=3", method="POST")
    assert status == 403 and "token" in data["error"]
    status, _, _ = call(server.url + "/jobs/bulk/delete?expect=3", "POST",
                        form={"token": "wrong-token-123456"})
    assert status == 403
    assert states(conn, ids) == {"discarded": 3}


def test_cancel_and_delete_touch_only_the_states_they_apply_to(server, conn):
    waiting = add(conn, 4, "available")
    running = add(conn, 2, "running")
    done = add(conn, 3, "completed")
    status, data = api(server, "/api/jobs/bulk/cancel?queue=imports&expect=100",
                       method="POST", headers=BEARER)
    assert status == 200 and data["changed"] == 6
    assert states(conn, waiting + running) == {"cancelled": 6}
    assert states(conn, done) == {"completed": 3}
    status, data = api(server, "/api/jobs/bulk/delete?queue=imports&state=completed&expect=100",
                       method="POST", headers=BEARER)
    assert status == 200 and data["changed"] == 3
    assert states(conn, done) == {}
    assert states(conn, waiting + running) == {"cancelled": 6}


def test_retry_keeps_one_live_job_per_unique_key(server, conn):
    held = add(conn, 1, "available", unique_key="report-42")
    twins = add(conn, 2, "discarded", unique_key="report-42")
    pair = add(conn, 2, "discarded", unique_key="report-43")
    status, data = api(server, "/api/jobs/bulk/retry?expect=100", method="POST",
                       headers=BEARER)
    assert status == 200 and data == {"action": "retry", "changed": 1, "skipped": 3}
    assert states(conn, held) == {"available": 1} and states(conn, twins) == {"discarded": 2}
    assert states(conn, pair) == {"available": 1, "discarded": 1}


def test_the_page_counts_confirms_and_comes_back_with_a_notice(server, conn):
    ids = add(conn, 7, "discarded")
    status, _, body = call(server.url + "/jobs/bulk/retry?state=discarded&queue=imports")
    assert status == 200 and b"<b>7</b> jobs match" in body
    assert b"expect=7" in body
    status, headers, _ = call(
        server.url + "/jobs/bulk/retry?state=discarded&queue=imports&expect=7", "POST",
        form={"token": TOKEN})
    assert status == 303 and "done=bulk" in headers["location"]
    status, _, body = call(server.url + headers["location"])
    assert status == 200 and b"Retried: 7 jobs." in body
    assert states(conn, ids) == {"available": 7}


@pytest.mark.parametrize("path", [
    "/api/jobs/bulk/explode", "/api/jobs/bulk/retry?q=boom", "/api/jobs/bulk/retry?state=bogus",
    "/api/jobs/bulk/retry?kind=a%00b", "/api/jobs/bulk/retry?created_after=2026-02-30",
])
def test_bad_bulk_requests_are_a_400(server, path):
    status, data = api(server, path)
    assert status == 400 and data["error"] and "\n" not in data["error"]


@pytest.mark.parametrize("expect", ["", "0", "-1", "x", str(bulk.CAP + 1)])
def test_acting_needs_a_confirmed_count(server, conn, expect):
    ids = add(conn, 2, "discarded")
    status, data = api(server, f"/api/jobs/bulk/retry?expect={expect}", method="POST",
                       headers=BEARER)
    assert status == 400 and "expect" in data["error"]
    assert states(conn, ids) == {"discarded": 2}


def test_batches_are_short_transactions(dsn, conn):
    # Each batch commits on its own: with BATCH jobs per batch, a retry of 2.5 batches
    # leaves three transactions' worth of xmin values on the rows.
    ids = add(conn, int(bulk.BATCH * 2.5), "discarded")
    with psycopg.connect(dsn, autocommit=True) as other:
        result = bulk.run(other, "retry", bulk.BulkFilter(state="discarded"), 10**9)
    assert result.changed == len(ids)
    xmins = conn.execute("SELECT count(DISTINCT xmin::text) FROM supervisor.jobs "
                         "WHERE id = ANY(%s)", (ids,)).fetchone()[0]
    assert xmins == 3

"""A batch's actions on the dashboard (issue 42), through a real ``supervisor
dashboard`` over a real database: the batch page, the count shown before confirming,
the action done on the whole batch with the token, and refusals (no token, unknown
batch, finished batch, bad priority) that change nothing."""

from __future__ import annotations

import pytest
from dashboard_seed import TOKEN, DashboardProcess
from test_dashboard_http import api, call

from shared.batches import Callback
from shared.enqueue import enqueue_many

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]  # a dashboard per test
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def server(dsn):
    proc = DashboardProcess(dsn, TOKEN, refresh=0)
    try:
        yield proc
    finally:
        proc.close()


def states(conn, batch_id: int) -> dict[str, int]:
    return dict(conn.execute("SELECT state, count(*) FROM supervisor.jobs "
                             "WHERE batch_id = %s GROUP BY state", (batch_id,)).fetchall())


def a_batch(dsn, n: int = 30):
    return enqueue_many("dash_member", [{"n": i} for i in range(n)], queue="dash",
                        then=Callback("dash_done", {}, queue="dash"), dsn=dsn)


def test_the_page_counts_then_cancels_the_whole_batch_once(server, dsn, conn):
    batch = a_batch(dsn)
    status, _, body = call(f"{server.url}/batches/{batch.id}")
    assert status == 200 and f"/batches/{batch.id}/cancel" in body.decode()
    assert "no attempt measured yet; 0 attempts (0 retries)" in body.decode()  # its cost
    status, data = api(server, f"/api/batches/{batch.id}")
    assert status == 200 and data["cost"]["attempts"] == 0 and data["total"] == 30
    status, _, body = call(f"{server.url}/batches/{batch.id}/cancel")
    assert status == 200 and "<b>30</b> members of 30" in body.decode()
    # Without the token nothing happens.
    status, data = api(server, f"/api/batches/{batch.id}/cancel", method="POST")
    assert status in (401, 403) and states(conn, batch.id) == {"available": 30}
    # A form posted with the token comes back to the batch page with a notice.
    status, headers, _ = call(f"{server.url}/batches/{batch.id}/cancel", method="POST",
                              form={"token": TOKEN})
    assert status == 303 and headers["location"] == f"/batches/{batch.id}?done=batch-cancel"
    assert states(conn, batch.id) == {"cancelled": 30}
    [(callbacks, stop)] = conn.execute(
        "SELECT (SELECT count(*) FROM supervisor.jobs WHERE kind = 'dash_done'), stop_kind "
        "FROM supervisor.batches WHERE id = %s", (batch.id,)).fetchall()
    assert callbacks == 1 and stop == "cancelled"
    # Finished: a second cancel is a 409 and changes nothing.
    status, data = api(server, f"/api/batches/{batch.id}/cancel", method="POST",
                       headers=BEARER)
    assert status == 409 and "is finished (cancelled)" in data["error"]
    status, _, body = call(f"{server.url}/batches/{batch.id}")
    assert status == 200 and 'id="stopped"' in body.decode()


def test_pause_resume_and_priority_by_api(server, dsn, conn):
    batch = a_batch(dsn, 12)
    status, data = api(server, f"/api/batches/{batch.id}/pause", method="POST",
                       headers=BEARER)
    assert status == 200 and data["action"] == "pause" and data["changed"] == 12
    assert states(conn, batch.id) == {"scheduled": 12}
    status, data = api(server, f"/api/batches/{batch.id}/pause", method="POST",
                       headers=BEARER)
    assert status == 409 and "paused already" in data["error"]
    status, data = api(server, f"/api/batches/{batch.id}/resume", method="POST",
                       headers=BEARER)
    assert status == 200 and data["changed"] == 12
    assert states(conn, batch.id) == {"available": 12}
    status, data = api(server, f"/api/batches/{batch.id}/priority?priority=-5",
                       method="POST", headers=BEARER)
    assert status == 200 and data["changed"] == 12
    assert conn.execute("SELECT array_agg(DISTINCT priority) FROM supervisor.jobs "
                        "WHERE batch_id = %s", (batch.id,)).fetchone()[0] == [-5]


@pytest.mark.parametrize("path, expected", [
    ("/api/batches/999999/cancel", 404),
    ("/api/batches/nope/cancel", 400),
    ("/api/batches/{id}/explode", 400),
    ("/api/batches/{id}/priority?priority=high", 400),
    ("/api/batches/{id}/priority", 400),
])
def test_bad_batch_requests_change_nothing(server, dsn, conn, path, expected):
    batch = a_batch(dsn, 5)
    status, data = api(server, path.format(id=batch.id), method="POST", headers=BEARER)
    assert status == expected and "error" in data and "\n" not in data["error"]
    assert states(conn, batch.id) == {"available": 5}


def test_retry_is_offered_for_a_finished_batch_with_failed_members(server, dsn, conn):
    batch = a_batch(dsn, 4)
    conn.execute("UPDATE supervisor.jobs SET state = 'discarded', finished_at = now() "
                 "WHERE id = %s", (batch.ids[0],))
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE id = ANY(%s)", (batch.ids[1:],))
    status, _, body = call(f"{server.url}/batches/{batch.id}")
    assert status == 200 and 'id="act-retry"' in body.decode()
    status, data = api(server, f"/api/batches/{batch.id}/retry", method="POST",
                       headers=BEARER)
    assert status == 200 and data["changed"] == 1
    assert states(conn, batch.id) == {"available": 1, "completed": 3}

"""The dashboard's pages for schedules, batches, kinds and global limits, through plain
HTTP against a real ``supervisor dashboard`` over a real seeded database: what each
shows, its JSON twin, and the schedule actions (pause, resume, run now) with and
without the token."""

from __future__ import annotations

import urllib.parse

import psycopg
import pytest
from dashboard_seed import TOKEN
from test_dashboard_http import api, call

pytestmark = pytest.mark.timeout(60)
pytest_plugins = ["dashboard_fixtures"]  # pages
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def test_schedules_show_next_and_last_fire_and_status(pages):
    server, _dsn, _ids = pages
    status, data = api(server, "/api/schedules")
    assert status == 200
    found = {s["name"]: s for s in data["schedules"]}
    assert found["heartbeat-ping"]["status"] == "active"
    assert found["heartbeat-ping"]["next_fire"] is not None
    assert found["nightly-report"]["status"] == "paused"
    assert found["nightly-report"]["last_fire"] is not None
    status, _, body = call(server.url + "/schedules")
    assert status == 200 and b'data-schedule="nightly-report"' in body and b"0 2 * * *" in body


def test_schedule_actions_need_the_token_and_act(pages):
    server, dsn, _ids = pages
    path = "/api/schedules/heartbeat-ping/pause"
    assert api(server, path, method="POST")[0] == 403
    status, data = api(server, path, method="POST", headers=BEARER)
    assert status == 200 and data == {"name": "heartbeat-ping", "action": "pause",
                                      "was_paused": False}
    status, data = api(server, "/api/schedules/heartbeat-ping/resume", method="POST",
                       headers=BEARER)
    assert status == 200 and data["was_paused"] is True
    status, data = api(server, "/api/schedules/heartbeat-ping/run", method="POST",
                       headers=BEARER)
    assert status == 200
    with psycopg.connect(dsn, autocommit=True) as conn:
        kind, queue = conn.execute("SELECT kind, queue FROM supervisor.jobs WHERE id = %s",
                                   (data["job_id"],)).fetchone()
    assert (kind, queue) == ("ping", "reports")
    status, _, _ = call(server.url + "/schedules/heartbeat-ping/pause", "POST",
                        form={"token": TOKEN})
    assert status == 303
    assert api(server, "/api/schedules/no-such/run", method="POST", headers=BEARER)[0] == 409
    assert api(server, "/api/schedules/heartbeat-ping/explode", method="POST",
               headers=BEARER)[0] == 400


def test_batches_show_progress_members_callback_and_eta(pages):
    server, _dsn, ids = pages
    status, data = api(server, "/api/batches")
    assert status == 200
    (batch,) = data["batches"]
    assert batch["id"] == ids["batch"] and batch["total"] == 10
    assert (batch["counts"]["completed"], batch["counts"]["running"],
            batch["counts"]["available"]) == (5, 2, 3)
    assert batch["done"] == 5 and batch["percent"] == 50.0
    assert batch["callback_kind"] == "export_done" and batch["callback_id"] is None
    # Five left, each about the completed ones' mean run, two at a time.
    assert batch["eta"] == pytest.approx(5 * batch["mean_run"] / 2)
    status, _, body = call(server.url + "/batches")
    assert status == 200 and b"5/10" in body and b"export_done" in body


def test_kinds_show_counts_failure_rate_and_run_times(pages):
    server, _dsn, _ids = pages
    status, data = api(server, "/api/kinds")
    assert status == 200
    kinds = {k["kind"]: k for k in data["kinds"]}
    welcome = kinds["send_welcome"]
    assert welcome["counts"]["completed"] == 4 and welcome["counts"]["discarded"] == 1
    assert welcome["failure_rate"] == pytest.approx(1 / 5)
    assert welcome["p50"] is not None and welcome["p95"] >= welcome["p50"]
    assert kinds["resize"]["counts"]["available"] == 6
    status, _, body = call(server.url + "/kinds")
    assert status == 200 and b"20.0%" in body


def test_limits_show_the_limit_and_each_supervisors_slice(pages):
    server, _dsn, _ids = pages
    status, data = api(server, "/api/limits")
    assert status == 200
    (limit,) = data["limits"]
    assert (limit["queue"], limit["max_running"], limit["max_rate"], limit["burst"]) == \
        ("exports", 4, 2.0, 5)
    (lease,) = limit["leases"]
    assert (lease["host"], lease["pid"], lease["slots"], lease["want_slots"]) == \
        ("build-7", 4242, 2, 3)
    status, _, body = call(server.url + "/limits")
    assert status == 200 and b"build-7:4242" in body


def test_every_new_page_is_in_the_navigation(pages):
    server, _dsn, _ids = pages
    _, _, body = call(server.url + "/")
    for path in ("/kinds", "/schedules", "/batches", "/limits"):
        assert f'href="{path}"'.encode() in body
    odd = urllib.parse.quote("no/such <b>", safe="")
    assert api(server, f"/api/schedules/{odd}/run", method="POST", headers=BEARER)[0] == 409


def test_metrics_export_queue_gauges_once_for_the_cluster(pages):
    server, _dsn, _ids = pages
    status, headers, body = call(server.url + "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    text = body.decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = value
    assert samples['supervisor_queue_jobs{queue="images",state="available"}'] == "6"
    assert samples['supervisor_queue_jobs{queue="images",state="running"}'] == "2"
    assert samples['supervisor_queue_jobs{queue="exports",state="claimed"}'] == "0"
    assert float(samples['supervisor_queue_oldest_seconds{queue="images"}']) >= 800
    assert samples['supervisor_queue_oldest_seconds{queue="email"}'] == "0"
    # exports: 3 waiting, 5 completed within the last minute: 3 / (5 / 60) = 36 s.
    assert float(samples['supervisor_queue_drain_seconds{queue="exports"}']) == \
        pytest.approx(36, rel=0.01)
    assert samples['supervisor_queue_drain_seconds{queue="images"}'] == "+Inf"
    assert samples['supervisor_queue_drain_seconds{queue="email"}'] == "0"  # none waits


def test_history_and_its_chart_come_from_the_rollup(pages):
    server, dsn, _ids = pages
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO supervisor.job_minutes (minute, queue, kind, completed, "
                     "discarded, retried) VALUES (date_trunc('minute', now()) - "
                     "interval '5 minutes', 'images', 'resize', 42, 3, 4)")
    status, data = api(server, "/api/history?minutes=10")
    assert status == 200 and len(data["minutes"]) == 10
    assert [m["completed"] for m in data["minutes"]].count(42) == 1
    assert sum(m["failed"] for m in data["minutes"]) == 3
    status, _, body = call(server.url + "/")
    assert status == 200 and b'<svg class="chart"' in body
    assert b"completed 42" in body and b"failed 3" in body
    assert body.count(b"<script") == 1  # the page's own script; the chart has none
    for bad in ("0", "1441", "x"):
        assert api(server, f"/api/history?minutes={bad}")[0] == 400

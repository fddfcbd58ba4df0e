"""The dashboard over plain HTTP (no browser): the JSON API, the pages' status codes,
escaping, and who may act. A real ``supervisor dashboard`` process over a real
database seeded with jobs in every state (see ``dashboard_seed``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psycopg
import pytest
from dashboard_seed import PROXIED_HOST, TOKEN, XSS, DashboardProcess
from markupsafe import escape

from shared.jobs import STATES

pytestmark = pytest.mark.timeout(60)
pytest_plugins = ["dashboard_fixtures"]  # seeded, acting, read_only


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def call(url: str, method: str = "GET", *, headers: dict | None = None,
         form: dict | None = None, body: bytes | None = None):
    """(status, headers, body bytes) without following redirects."""
    data = body
    headers = dict(headers or {})
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with _OPENER.open(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def api(server, path: str, **kwargs):
    status, _headers, body = call(server.url + path, **kwargs)
    return status, json.loads(body)  # stdlib: integers of any size, like jsonb


def state_of(dsn: str, job_id: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s",
                            (job_id,)).fetchone()[0]


BEARER = {"Authorization": f"Bearer {TOKEN}"}


def test_api_queues_counts_every_state_and_pause(read_only):
    status, data = api(read_only, "/api/queues")
    assert status == 200
    queues = {q["name"]: q for q in data["queues"]}
    assert set(queues) == {"email", "images", "reports"}
    images = queues["images"]["counts"]
    assert set(images) == {*STATES, "claimed"}  # claimed but not started: its own count
    assert images["available"] == 6 and images["running"] == 2 and images["claimed"] == 0
    assert images["retryable"] == 1 and images["cancelled"] == 1
    assert queues["email"]["paused"] is True and queues["images"]["paused"] is False
    assert queues["images"]["oldest_available"] >= 800  # the oldest was due 900 s ago
    assert queues["email"]["rate"] > 0  # completions within the last minute


def test_api_status_and_supervisors(read_only):
    status, data = api(read_only, "/api/status")
    assert status == 200
    assert sum(data["totals"].values()) == 18
    status, data = api(read_only, "/api/supervisors")
    assert status == 200
    (sup,) = data["supervisors"]
    assert (sup["host"], sup["pid"], sup["children"], sup["busy"]) == ("build-7", 4242, 4, 2)


@pytest.mark.parametrize(("query", "expect"), [
    ("state=discarded", lambda j: j["state"] == "discarded"),
    ("queue=email", lambda j: j["queue"] == "email"),
    ("kind=resize&state=available", lambda j: (j["kind"], j["state"]) == ("resize", "available")),
    ("q=missing.png", lambda j: j["kind"] == "resize"),
    ("q=relay+refused", lambda j: j["state"] == "discarded"),
])
def test_api_jobs_filters(read_only, query, expect):
    status, data = api(read_only, f"/api/jobs?{query}")
    assert status == 200 and data["jobs"]
    assert all(expect(job) for job in data["jobs"])


def test_api_jobs_text_search_finds_an_id_and_treats_wildcards_as_text(read_only, seeded):
    _dsn, ids = seeded
    _, data = api(read_only, f"/api/jobs?q={ids['scheduled']}")
    assert ids["scheduled"] in [j["id"] for j in data["jobs"]]
    _, data = api(read_only, "/api/jobs?q=%25")  # a literal "%": no arg or error has one
    assert data["jobs"] == []


def test_api_jobs_pages_by_id(read_only):
    _, first = api(read_only, "/api/jobs?limit=5")
    assert len(first["jobs"]) == 5 and first["next_before"] == first["jobs"][-1]["id"]
    _, second = api(read_only, f"/api/jobs?limit=5&before={first['next_before']}")
    assert max(j["id"] for j in second["jobs"]) < min(j["id"] for j in first["jobs"])
    _, everything = api(read_only, "/api/jobs?limit=500")
    assert len(everything["jobs"]) == 18 and everything["next_before"] is None


def test_api_job_has_args_result_progress_and_every_error(read_only, seeded):
    _dsn, ids = seeded
    _, job = api(read_only, f"/api/jobs/{ids['retryable']}")
    assert job["args"] == {"path": "missing.png", "width": 64}
    assert [e["kind"] for e in job["errors"]] == ["error", "timeout"]
    assert "Traceback (most recent call last)" in job["errors"][0]["traceback"]
    _, job = api(read_only, f"/api/jobs/{ids['running']}")
    assert job["progress"] == {"done": 7, "total": 10, "message": "tile 7 of 10"}
    _, job = api(read_only, f"/api/jobs/{ids['completed0']}")
    assert job["result"] == {"sent": True, "message_id": "m-0"}


@pytest.mark.parametrize("path", [
    "/api/jobs?state=bogus", "/api/jobs?limit=0", "/api/jobs?limit=x", "/api/jobs?before=-3",
    "/api/jobs?q=" + "x" * 201, "/api/jobs/abc", "/api/jobs/0", "/api/jobs/99999999999999999999",
    "/api/jobs?q=a%00b", "/api/jobs?kind=%00", "/api/jobs?queue=x%00y", "/api/jobs?%00=1",
    "/api/jobs?created_after=2026-13-45", "/api/jobs?created_before=99999-01-01",
    "/api/jobs?sort=random", "/api/jobs?q=%7Bnot+json", "/api/jobs?state=claimed",
])
def test_bad_input_is_a_400_with_one_line(read_only, path):
    status, data = api(read_only, path)
    assert status == 400
    assert data["error"] and "\n" not in data["error"]


def test_bad_filters_on_the_page_are_a_400_page_never_a_500(read_only):
    for path, says in [("/jobs?q=a%00b", b"NUL byte"), ("/jobs?created_after=tomorrow",
                                                      b"ISO 8601")]:
        status, _, body = call(read_only.url + path)
        assert status == 400 and says in body


def test_search_by_id_text_args_kind_and_time_range(read_only, seeded):
    _dsn, ids = seeded
    _, data = api(read_only, f"/api/jobs?q={ids['retryable']}")
    assert [j["id"] for j in data["jobs"]] == [ids["retryable"]]
    _, data = api(read_only, "/api/jobs?q=" + urllib.parse.quote('{"width": 64}'))
    assert ids["retryable"] in [j["id"] for j in data["jobs"]]
    assert all(j["kind"] == "resize" for j in data["jobs"])
    _, data = api(read_only, "/api/jobs?q=RENDER")  # a kind, by part, any case
    assert data["jobs"] and {j["kind"] for j in data["jobs"]} == {"render_tile"}
    _, data = api(read_only, "/api/jobs?q=refused+relay")  # words of an error, any order
    assert data["jobs"] and all(j["state"] == "discarded" for j in data["jobs"])
    _, newest = api(read_only, "/api/jobs?limit=3")
    _, oldest = api(read_only, "/api/jobs?limit=3&sort=oldest")
    assert [j["id"] for j in newest["jobs"]] == sorted((j["id"] for j in newest["jobs"]),
                                                       reverse=True)
    assert oldest["jobs"][0]["id"] < newest["jobs"][-1]["id"] and oldest["next_after"]
    _, rest = api(read_only, f"/api/jobs?sort=oldest&after={oldest['next_after']}")
    assert min(j["id"] for j in rest["jobs"]) > oldest["next_after"]
    _, none = api(read_only, "/api/jobs?created_before=2000-01-01")
    assert none["jobs"] == []
    _, every = api(read_only, "/api/jobs?created_after=2000-01-01&limit=500")
    assert len(every["jobs"]) == 18


def test_unknown_job_is_404_on_page_and_api(read_only):
    assert api(read_only, "/api/jobs/123456")[0] == 404
    status, _, body = call(read_only.url + "/jobs/123456")
    assert status == 404 and b"no job with id 123456" in body


def test_every_page_renders_and_escapes_job_values(read_only, seeded):
    _dsn, ids = seeded
    paths = ["/", "/jobs", "/supervisors", "/jobs?state=discarded&q=relay"]
    paths += [f"/jobs/{job_id}" for job_id in ids.values()]
    for path in paths:
        status, headers, body = call(read_only.url + path)
        assert status == 200, path
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        text = body.decode()
        assert XSS not in text, path
    _, _, body = call(read_only.url + f"/jobs/{ids['discarded']}")
    assert str(escape(XSS)) in body.decode()  # shown, as text
    assert body.decode().count("<script") == 1  # ours, in <head>


def test_read_only_dashboard_refuses_every_action(read_only, seeded):
    dsn, ids = seeded
    for path in (f"/jobs/{ids['discarded_binding']}/retry", f"/jobs/{ids['available5']}/cancel",
                 "/queues/images/pause", "/queues/email/resume"):
        for headers in ({}, BEARER):
            status, data = api(read_only, path, method="POST", headers=headers)
            assert status == 403 and "read-only" in data["error"]
        status, _, body = call(read_only.url + path, "POST", form={"token": TOKEN})
        assert status == 403 and b"read-only" in body
    assert state_of(dsn, ids["discarded_binding"]) == "discarded"
    assert state_of(dsn, ids["available5"]) == "available"


def test_retry_needs_the_token(acting, seeded):
    dsn, ids = seeded
    job = ids["cancelled"]
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        status, _ = api(acting, f"/jobs/{job}/retry", method="POST", headers=headers)
        assert status == 403
    assert state_of(dsn, job) == "cancelled"
    status, data = api(acting, f"/jobs/{job}/retry", method="POST", headers=BEARER)
    assert status == 200 and data == {"id": job, "action": "retry", "was": "cancelled",
                                      "state": "available"}
    assert state_of(dsn, job) == "available"
    status, data = api(acting, f"/api/jobs/{job}/retry", method="POST", headers=BEARER)
    assert status == 409 and "only discarded, cancelled or retryable" in data["error"]


def test_form_with_token_acts_and_redirects_without_cookies(acting, seeded):
    dsn, ids = seeded
    job = ids["available4"]
    status, headers, _ = call(acting.url + f"/jobs/{job}/cancel", "POST", form={"token": "x"})
    assert status == 403 and state_of(dsn, job) == "available"
    status, headers, _ = call(acting.url + f"/jobs/{job}/cancel", "POST", form={"token": TOKEN})
    assert status == 303 and headers["Location"] == f"/jobs/{job}?done=cancelled"
    assert "Set-Cookie" not in headers
    assert state_of(dsn, job) == "cancelled"
    # A token in the query string is not a form field: refused.
    status, _, _ = call(acting.url + f"/jobs/{ids['retryable']}/retry?token={TOKEN}", "POST",
                        form={})
    assert status == 403


def test_the_page_token_works_behind_a_proxy_with_basic_authentication(acting, seeded):
    """Issue 50: behind a proxy that asks for HTTP Basic, the browser adds its
    ``Authorization`` header to every request, the page's form posts included; the
    form's token still counts (and the answer is still the page's redirect), as does
    ``X-Supervisor-Token`` beside it. The proxy's password is no action token."""
    import base64

    dsn, ids = seeded
    basic = {"Authorization": "Basic " + base64.b64encode(b"ops:proxy-pw").decode()}
    job = ids["available3"]
    status, _, _ = call(acting.url + f"/jobs/{job}/cancel", "POST", headers=basic,
                        form={"token": "wrong"})
    assert status == 403 and state_of(dsn, job) == "available"
    status, headers, _ = call(acting.url + f"/jobs/{job}/cancel", "POST", headers=basic,
                              form={"token": TOKEN})
    assert status == 303 and headers["Location"] == f"/jobs/{job}?done=cancelled"
    assert state_of(dsn, job) == "cancelled"
    with_header = {**basic, "X-Supervisor-Token": TOKEN}
    status, data = api(acting, f"/jobs/{job}/retry", method="POST", headers=with_header)
    assert status == 200 and data["state"] == "available", data
    status, _ = api(acting, f"/jobs/{job}/cancel", method="POST",
                    headers={**basic, "X-Supervisor-Token": "wrong"})
    assert status == 403 and state_of(dsn, job) == "available"


def test_pause_and_resume_a_queue(acting, seeded):
    status, data = api(acting, "/queues/reports/pause", method="POST", headers=BEARER)
    assert status == 200 and data["paused"] is True and data["was_paused"] is False
    status, _, _ = call(acting.url + "/queues/reports/resume", "POST", form={"token": TOKEN})
    assert status == 303
    _, data = api(acting, "/api/queues")
    assert {q["name"]: q["paused"] for q in data["queues"]}["reports"] is False
    odd = urllib.parse.quote("odd/name <b>", safe="")
    status, data = api(acting, f"/api/queues/{odd}/pause", method="POST", headers=BEARER)
    assert status == 200 and data["name"] == "odd/name <b>"
    status, _, body = call(acting.url + "/")
    assert b"odd/name <b>" not in body and b"odd/name &lt;b&gt;" in body


def test_pause_with_stop_running_through_the_api(acting, seeded):
    dsn, _ids = seeded
    status, data = api(acting, "/api/queues/reports/pause?stop_running=1", method="POST",
                       headers=BEARER)
    assert status == 200 and data["stop_running"] is True and data["running"] >= 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT paused, stop_running FROM supervisor.queues "
                            "WHERE name = 'reports'").fetchone() == (True, True)
    _, data = api(acting, "/api/queues")
    assert {q["name"]: q["stop_running"] for q in data["queues"]}["reports"] is True
    status, data = api(acting, "/api/queues/reports/pause?stop_running=maybe",
                       method="POST", headers=BEARER)
    assert status == 400 and "stop_running is 1 or 0" in str(data)


def test_a_foreign_host_header_is_refused(read_only):
    # A page whose DNS name was rebound to 127.0.0.1 sends its own name as Host.
    status, _, _ = call(read_only.url + "/api/queues", headers={"Host": "evil.example"})
    assert status == 400
    # The name a reverse proxy passes on is answered once named with --allowed-host.
    status, _, _ = call(read_only.url + "/api/queues", headers={"Host": PROXIED_HOST})
    assert status == 200


@pytest.mark.slow
def test_database_away_answers_503_then_recovers(seeded, pg_base_dsn):
    dsn, _ids = seeded
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    server = DashboardProcess(dsn, None)
    try:
        assert api(server, "/api/queues")[0] == 200
        with psycopg.connect(pg_base_dsn, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s AND application_name = 'supervisor-dashboard'",
                         (name,))
        try:
            status, data = api(server, "/api/queues")
            assert status == 503 and data["error"].startswith("database unreachable since ")
            since = data["down_since"]
            status, data = api(server, "/api/jobs")
            assert status == 503 and data["down_since"] == since  # since the first failure
            status, _, body = call(server.url + "/")
            assert status == 503 and b"Traceback" not in body
            assert b"data-down-since=" in body and b"database unreachable since" in body
        finally:
            with psycopg.connect(pg_base_dsn, autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        assert api(server, "/api/queues")[0] == 200
        assert "down_since" not in api(server, "/api/jobs")[1]
    finally:
        server.close()


def _cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "supervisor", "dashboard", *args],
                          capture_output=True, text=True, timeout=30, env=env)


@pytest.mark.slow
def test_missing_extra_is_one_line_naming_the_install(tmp_path: Path):
    fake = tmp_path / "starlette"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'starlette'\", name='starlette')\n")
    repo = Path(__file__).resolve().parent.parent
    done = _cli("--dsn", "postgresql://nowhere/x",
                env_extra={"PYTHONPATH": f"{tmp_path}{os.pathsep}{repo}"})
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "pip install 'pg-supervisor[dashboard]'" in done.stderr


@pytest.mark.slow
def test_a_taken_port_is_one_line(read_only, seeded):
    port = urllib.parse.urlsplit(read_only.url).port
    done = _cli("--port", str(port), "--dsn", seeded[0])
    assert done.returncode == 1
    assert done.stderr.strip().startswith("supervisor: error: cannot listen on 127.0.0.1:")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_an_unreachable_database_is_one_line():
    done = _cli("--port", "0", "--dsn", "postgresql://postgres@127.0.0.1:1/none")
    assert done.returncode == 1
    assert done.stderr.startswith("supervisor: error: cannot connect")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_odd_rows_written_by_plain_sql_still_render(dsn, conn):
    # Producers in any language write these tables: integers past 64 bits, errors that
    # are not objects, progress that is not an object, a queue name full of markup.
    job = conn.execute("""
        INSERT INTO supervisor.jobs (kind, queue, args, state, errors, progress, result)
        VALUES ('odd', '<i>q</i>', '{"n": 123456789012345678901234567890}', 'running',
                '["just text", 42, {"message": null}]', '"half"', '[1e400]')
        RETURNING id""").fetchone()[0]
    server = DashboardProcess(dsn, None)
    try:
        for path in ("/", "/jobs", f"/jobs/{job}", "/jobs?q=odd"):
            status, _, body = call(server.url + path)
            assert status == 200, (path, body[:300])
            assert b"<i>q</i>" not in body
        status, data = api(server, f"/api/jobs/{job}")
        assert status == 200 and data["args"] == {"n": 123456789012345678901234567890}
        status, data = api(server, "/api/jobs")
        assert status == 200 and data["jobs"][0]["last_error"] is None
    finally:
        server.close()

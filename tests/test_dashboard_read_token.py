"""A dashboard bound to a non-loopback address answers any Host name, so a page that
rebinds its DNS name to it could read job args and errors; there every request needs
the read token (or the operator token), and it will not start with neither set."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import pytest
from dashboard_seed import TOKEN, DashboardProcess
from test_dashboard_http import call

from supervisor.dashboard.auth import READ_REFUSED

pytestmark = pytest.mark.timeout(60)
pytest_plugins = ["dashboard_fixtures"]  # seeded

READ_TOKEN = "read-token-2b9c41d0e8"


def basic(password: str, user: str = "anyone") -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


@pytest.fixture(scope="module")
def exposed(seeded):
    """A dashboard on 0.0.0.0 with a read token and the operator token."""
    os.environ["SUPERVISOR_DASHBOARD_READ_TOKEN"] = READ_TOKEN
    try:
        server = DashboardProcess(seeded[0], TOKEN, extra_args=("--host", "0.0.0.0"))
    finally:
        del os.environ["SUPERVISOR_DASHBOARD_READ_TOKEN"]
    server.url = server.url.replace("0.0.0.0", "127.0.0.1")
    try:
        yield server
    finally:
        server.close()


def test_reads_need_a_token_whatever_the_host_name(exposed):
    for path in ("/", "/jobs", "/api/jobs", "/api/status"):
        for headers in ({}, {"Host": "rebound.example"}, basic("wrong"),
                        {"Authorization": "Bearer wrong"}):
            status, answer, body = call(exposed.url + path, headers=headers)
            assert status == 401, (path, headers)
            assert body == READ_REFUSED
            assert answer["WWW-Authenticate"].startswith('Basic realm="supervisor dashboard"')


def test_read_token_or_operator_token_reads(exposed):
    for headers in (basic(READ_TOKEN), {"Authorization": f"Bearer {READ_TOKEN}"},
                    basic(TOKEN), {"Authorization": f"Bearer {TOKEN}"},
                    {**basic(READ_TOKEN), "Host": "dash.example.org"}):
        assert call(exposed.url + "/api/jobs", headers=headers)[0] == 200, headers
    assert call(exposed.url + "/static/dashboard.css")[0] == 200  # no secrets there


def test_read_token_cannot_act(exposed, seeded):
    job_id = seeded[1]["retryable"]
    status, _headers, body = call(f"{exposed.url}/api/jobs/{job_id}/cancel", "POST",
                                  headers={"Authorization": f"Bearer {READ_TOKEN}"})
    assert status == 403 and b"wrong dashboard token" in body


def test_refuses_to_listen_beyond_loopback_without_a_token(seeded):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERVISOR_DASHBOARD")}
    proc = subprocess.run([sys.executable, "-m", "supervisor", "dashboard", "--host", "0.0.0.0",
                           "--port", "0", "--dsn", seeded[0]], capture_output=True, text=True,
                          env=env, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr == ("supervisor: error: listening on 0.0.0.0 (not loopback) needs a "
                           "token for reads: set SUPERVISOR_DASHBOARD_READ_TOKEN (or "
                           "SUPERVISOR_DASHBOARD_TOKEN)\n")

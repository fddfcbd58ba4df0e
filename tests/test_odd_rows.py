"""Rows plain-SQL producers write and the Python API never does still render, in the
CLI and on the dashboard: run_at of 'infinity' or past year 9999, a timeout of NaN or
Infinity (refused by the schema since 0012, shown if an older row has one), max_attempts
not resolved yet; and a NUL byte in a dashboard filter is a 400, not a 500."""

from __future__ import annotations

import psycopg
import pytest
from click.testing import CliRunner
from dashboard_seed import DashboardProcess
from test_dashboard_http import api, call

from supervisor.cli.main import main

pytestmark = pytest.mark.timeout(60)


def insert_odd_rows(conn) -> dict[str, int]:
    ids = {}
    for name, run_at in (("inf", "infinity"), ("far", "12000-01-01 00:00:00+00")):
        ids[name] = conn.execute(
            "INSERT INTO supervisor.jobs (kind, state, run_at) VALUES (%s, 'scheduled', %s) "
            "RETURNING id", (f"odd_{name}", run_at)).fetchone()[0]
    # Rows from before 0012 may hold these; the constraint is NOT VALID for them.
    conn.execute("ALTER TABLE supervisor.jobs DROP CONSTRAINT jobs_timeout_finite")
    for name, timeout in (("nan", "NaN"), ("inf_timeout", "Infinity")):
        ids[name] = conn.execute(
            "INSERT INTO supervisor.jobs (kind, timeout) VALUES (%s, %s) RETURNING id",
            (f"odd_{name}", timeout)).fetchone()[0]
    conn.execute("ALTER TABLE supervisor.jobs ADD CONSTRAINT jobs_timeout_finite CHECK "
                 "(timeout IS NULL OR (timeout > 0 AND timeout < 'Infinity'::float8)) NOT VALID")
    return ids


@pytest.mark.parametrize("timeout", ["NaN", "Infinity", "-Infinity", "0"])
def test_the_schema_refuses_a_timeout_that_is_not_a_finite_positive_number(conn, timeout):
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO supervisor.jobs (kind, timeout) VALUES ('k', %s)", (timeout,))
    conn.execute("INSERT INTO supervisor.jobs (kind, timeout) VALUES ('k', 0.5)")


def test_cli_lists_and_shows_rows_past_year_9999(dsn, conn):
    ids = insert_odd_rows(conn)
    listed = CliRunner().invoke(main, ["jobs", "list", "--dsn", dsn])
    assert listed.exit_code == 0, listed.output
    assert "never (run_at infinity)" in listed.output
    assert "never (run_at 12000-01-01 00:00:00+00)" in listed.output
    for name, line in (("inf", "  run_at:           infinity (never)"),
                       ("far", "  run_at:           12000-01-01 00:00:00+00 (never)"),
                       ("nan", "  timeout:          nan"),
                       ("inf_timeout", "  timeout:          inf")):
        shown = CliRunner().invoke(main, ["jobs", "show", str(ids[name]), "--dsn", dsn])
        assert shown.exit_code == 0, shown.output
        assert line in shown.output.splitlines(), shown.output
        assert "  attempt:          0 of its handler's limit (set at its first claim)" in \
            shown.output.splitlines()
    as_json = CliRunner().invoke(main, ["jobs", "show", str(ids["inf"]), "--json", "--dsn", dsn])
    assert as_json.exit_code == 0 and '"run_at":"9999-12-31T23:59:59.999999+00:00"' in \
        as_json.output.replace(" ", "")


@pytest.mark.slow
def test_dashboard_renders_them_and_refuses_nul_filters(dsn, conn):
    ids = insert_odd_rows(conn)
    server = DashboardProcess(dsn, None)
    try:
        for path in ("/", "/jobs", "/api/jobs", *(f"/jobs/{i}" for i in ids.values()),
                     *(f"/api/jobs/{i}" for i in ids.values())):
            status, _, body = call(server.url + path)
            assert status == 200, (path, body[:300])
        page = call(f"{server.url}/jobs/{ids['inf']}")[2].decode()
        assert "<td>infinity (never)</td>" in page
        assert "0 of its handler&#39;s limit (set at its first claim)" in page
        assert "None" not in page
        page = call(f"{server.url}/jobs/{ids['far']}")[2].decode()
        assert "<td>12000-01-01 00:00:00+00 (never)</td>" in page
        assert "<th>timeout</th><td>not a number</td>" in call(
            f"{server.url}/jobs/{ids['nan']}")[2].decode()
        assert "<th>timeout</th><td>infinite</td>" in call(
            f"{server.url}/jobs/{ids['inf_timeout']}")[2].decode()
        for name in ("q", "kind", "queue"):
            status, data = api(server, f"/api/jobs?{name}=a%00b")
            assert (status, data) == (400, {"error": f"parameter '{name}' contains a NUL byte"})
            status, _, body = call(f"{server.url}/jobs?{name}=a%00b")
            # HTML-escaped on the page: parameter &#x27;q&#x27; ...
            assert status == 400 and b"contains a NUL byte" in body and name.encode() in body
    finally:
        server.close()


@pytest.mark.slow
def test_a_long_kind_and_queue_keep_the_pages_within_the_window(dsn, conn):
    """In a real browser: a 10,000-character kind made /jobs 81,749 px wide."""
    from dashboard_browser import missing, start_browser

    if missing() is not None:
        pytest.skip(str(missing()))
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By

    # The longest kind the schema accepts (0022: 255 characters): still far wider than
    # the window if nothing clipped it.
    kind, queue = "k" * 255, "q" * 200
    job = conn.execute("INSERT INTO supervisor.jobs (kind, queue) VALUES (%s, %s) RETURNING id",
                       (kind, queue)).fetchone()[0]
    server = DashboardProcess(dsn, None, refresh=0)
    driver = start_browser(width=1280, height=900)
    try:
        for path in ("/jobs", f"/jobs/{job}", "/"):
            driver.get(server.url + path)
            wide = driver.execute_script("return document.documentElement.scrollWidth")
            window = driver.execute_script("return window.innerWidth")
            assert wide <= window, (path, wide, window)
        driver.get(server.url + "/jobs")
        cell = driver.find_element(By.CSS_SELECTOR, f"#jobs tr[data-job='{job}'] td.clip")
        assert cell.get_attribute("title") == kind  # the whole kind on hover
    finally:
        driver.quit()
        server.close()

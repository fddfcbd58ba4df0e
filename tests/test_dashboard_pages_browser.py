"""The schedules, batches, kinds and limits pages in a real browser (Debian's Chromium
through Selenium), at desktop width and at 420 px; acting from the schedules page with
the token; and a page whose database goes away greying its figures and saying since
when. Skipped only when chromium or chromedriver is not installed."""

from __future__ import annotations

import psycopg
import pytest
from dashboard_browser import missing
from dashboard_seed import TOKEN, DashboardProcess
from test_dashboard_browser import css, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120),
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]
pytest_plugins = ["dashboard_fixtures"]  # pages

TOKEN_KEY = "supervisor-dashboard-token"


def test_schedules_page_pauses_and_runs_now_with_the_token(browser, pages):
    server, dsn, _ids = pages
    browser.get(server.url + "/schedules")
    browser.execute_script("sessionStorage.setItem(arguments[0], arguments[1])",
                           TOKEN_KEY, TOKEN)
    browser.refresh()
    rows = {r.get_attribute("data-schedule"): r for r in css(browser, "#schedules tbody tr")}
    assert rows["nightly-report"].get_attribute("data-status") == "paused"
    assert "0 2 * * *" in rows["nightly-report"].text
    assert "in " in rows["heartbeat-ping"].text  # its next fire, in the future
    run = rows["heartbeat-ping"].find_element("css selector", 'button[value="run"]')
    run.click()
    wait_for(lambda: "done=schedule-run" in browser.current_url, what="the run notice")
    assert "enqueued" in css(browser, "#notice")[0].text
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM supervisor.jobs WHERE kind = 'ping'"
                            ).fetchone()[0] >= 1
    row = css(browser, 'tr[data-schedule="nightly-report"]')[0]
    row.find_element("css selector", 'button[value="resume"]').click()
    wait_for(lambda: "done=schedule-resumed" in browser.current_url, what="the resume")
    assert css(browser, 'tr[data-schedule="nightly-report"]')[0].get_attribute(
        "data-status") == "active"


def test_batches_kinds_and_limits_pages_show_their_figures(browser, pages):
    server, _dsn, ids = pages
    browser.get(server.url + "/batches")
    row = css(browser, f'tr[data-batch="{ids["batch"]}"]')[0]
    assert row.find_element("css selector", "progress").get_attribute("value") == "50"
    assert "5 completed" in row.text and "2 running" in row.text and "export_done" in row.text
    browser.get(server.url + "/kinds")
    welcome = css(browser, 'tr[data-kind="send_welcome"]')[0]
    assert "20.0%" in welcome.text
    browser.get(server.url + "/limits")
    section = css(browser, 'section[data-queue="exports"]')[0]
    assert "4" in section.text and "build-7:4242" in section.text


@pytest.mark.parametrize("path", ["/", "/jobs", "/kinds", "/schedules", "/batches",
                                  "/limits", "/supervisors", "/queues/images",
                                  "/kinds/resize"])
def test_every_page_fits_a_420px_screen(browser, pages, path):
    server, _dsn, _ids = pages
    browser.set_window_size(420, 900)
    try:
        browser.get(server.url + path)
        # Wide tables scroll inside their own box; the page itself never does sideways.
        width = browser.execute_script("return document.documentElement.clientWidth")
        scroll = browser.execute_script("return document.documentElement.scrollWidth")
        assert scroll <= width + 1, (path, scroll, width)
    finally:
        browser.set_window_size(1280, 900)


def test_a_lost_database_greys_the_figures_and_says_since_when(browser, pages, pg_base_dsn):
    _server, dsn, _ids = pages
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    server = DashboardProcess(dsn, None, refresh=0.5)
    try:
        browser.get(server.url + "/")
        assert css(browser, "#queues")
        with psycopg.connect(pg_base_dsn, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            banner = wait_for(lambda: css(browser, "#stale-banner"), timeout=20,
                              what="the stale banner")[0]
            assert "database unreachable since" in banner.text and "UTC" in banner.text
            assert "stale-data" in css(browser, "#live")[0].get_attribute("class")
            assert css(browser, "#queues")  # the last figures stay, greyed
            opacity = browser.execute_script(
                "return getComputedStyle(document.getElementById('live')).opacity")
            assert float(opacity) < 1
        finally:
            with psycopg.connect(pg_base_dsn, autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        wait_for(lambda: not css(browser, "#stale-banner"), timeout=20, what="recovery")
        assert "stale-data" not in css(browser, "#live")[0].get_attribute("class")
    finally:
        server.close()


def test_bulk_retry_of_1000_discarded_jobs(browser, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, attempt, finished_at, "
                     "errors) SELECT 'sync_account', 'imports', 'discarded', 5, now(), "
                     "'[{\"message\": \"upstream down\"}]' FROM generate_series(1, 1000)")
        conn.execute("INSERT INTO supervisor.jobs (kind, queue, state) "
                     "SELECT 'other', 'imports', 'discarded' FROM generate_series(1, 3)")
    server = DashboardProcess(dsn, TOKEN, refresh=0)
    try:
        browser.get(server.url + "/jobs?kind=sync_account&state=discarded")
        browser.execute_script("sessionStorage.setItem(arguments[0], arguments[1])",
                               TOKEN_KEY, TOKEN)
        css(browser, "#bulk-retry")[0].click()
        count = wait_for(lambda: css(browser, "#bulk-count"), what="the count")[0]
        assert "1000 jobs match" in count.text
        confirm = css(browser, "#bulk-confirm")[0]
        assert confirm.text == "retry 1000 jobs"
        confirm.click()
        wait_for(lambda: "done=bulk" in browser.current_url, timeout=30, what="the result")
        assert "Retried: 1000 jobs." in css(browser, "#notice")[0].text
        with psycopg.connect(dsn, autocommit=True) as conn:
            found = dict(conn.execute("SELECT kind || '/' || state, count(*) "
                                      "FROM supervisor.jobs GROUP BY 1").fetchall())
        assert found == {"sync_account/available": 1000, "other/discarded": 3}
    finally:
        server.close()

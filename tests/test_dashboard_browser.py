"""The dashboard in a real browser: headless Chromium (Debian's package) through
Selenium, against real ``supervisor dashboard`` processes over a real database with
jobs in every state. Skipped only when chromium or chromedriver is not installed."""

from __future__ import annotations

import time

import psycopg
import pytest
from dashboard_browser import missing
from dashboard_seed import TOKEN, XSS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120),
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]
pytest_plugins = ["dashboard_fixtures"]  # seeded, acting, read_only


def wait_for(condition, timeout: float = 10.0, what: str = "condition"):
    """Poll ``condition()`` until it returns something truthy (returned) or time is up."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def css(driver, selector):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def state_of(dsn: str, job_id: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s",
                            (job_id,)).fetchone()[0]


def test_queues_page_shows_counts_rate_oldest_and_paused(browser, read_only):
    browser.get(read_only.url + "/")
    rows = {row.get_attribute("data-queue"): row for row in css(browser, "#queues tbody tr")}
    assert set(rows) == {"email", "images", "reports"}
    images = rows["images"].text
    assert "6" in images and "/s" in images and "m " in images  # available, rate, oldest
    assert "paused" in rows["email"].text and "paused" not in rows["images"].text
    assert css(browser, ".badge.readonly")  # no token here: read-only, no buttons
    assert not css(browser, "#queues button")
    browser.get(read_only.url + "/supervisors")
    (row,) = css(browser, "#supervisors tbody tr")
    assert "build-7" in row.text and "4242" in row.text and "2 / 4" in row.text


def test_filters_narrow_the_job_list(browser, read_only):
    from selenium.webdriver.support.select import Select

    browser.get(read_only.url + "/jobs")
    assert len(css(browser, "#jobs tbody tr")) == 18
    Select(css(browser, "#filters select[name=state]")[0]).select_by_value("discarded")
    css(browser, "#filters button")[0].click()
    wait_for(lambda: "state=discarded" in browser.current_url, what="the filtered page")
    states = {r.get_attribute("data-state") for r in css(browser, "#jobs tbody tr")}
    assert states == {"discarded"}
    Select(css(browser, "#filters select[name=state]")[0]).select_by_value("")
    Select(css(browser, "#filters select[name=queue]")[0]).select_by_value("images")
    kind = css(browser, "#filters input[name=kind]")[0]
    kind.clear()
    kind.send_keys("resize")
    css(browser, "#filters button")[0].click()
    wait_for(lambda: "kind=resize" in browser.current_url, what="the filtered page")
    rows = css(browser, "#jobs tbody tr")
    assert len(rows) == 8 and all("resize" in r.text and "images" in r.text for r in rows)
    text = css(browser, "#filters input[name=q]")[0]
    text.send_keys("missing.png")
    css(browser, "#filters button")[0].click()
    wait_for(lambda: "q=missing.png" in browser.current_url, what="the searched page")
    (row,) = css(browser, "#jobs tbody tr")
    assert row.get_attribute("data-state") == "retryable"
    browser.get(read_only.url + "/jobs?state=cancelled&queue=email")
    assert css(browser, "#no-jobs")


def test_one_job_shows_args_progress_and_every_error_with_traceback(browser, read_only,
                                                                     seeded):
    _dsn, ids = seeded
    browser.get(f"{read_only.url}/jobs/{ids['retryable']}")
    assert "missing.png" in css(browser, "#args")[0].text
    entries = css(browser, "#errors .error-entry")
    assert len(entries) == 2
    assert "timeout" in entries[0].text  # newest first
    tracebacks = css(browser, "#errors .traceback")
    assert len(tracebacks) == 1  # the newest traceback is open, so its text is visible
    assert "Traceback (most recent call last)" in tracebacks[0].text
    browser.get(f"{read_only.url}/jobs/{ids['running']}")
    assert "tile 7 of 10" in css(browser, "#progress")[0].text
    browser.get(f"{read_only.url}/jobs/{ids['completed0']}")
    assert "m-0" in css(browser, "#result")[0].text


def test_a_script_in_an_error_is_shown_as_text(browser, read_only, seeded):
    _dsn, ids = seeded
    browser.get(f"{read_only.url}/jobs/{ids['discarded']}")
    title = f"Job {ids['discarded']} · supervisor"
    assert browser.title == title  # the injected script would have changed it
    messages = css(browser, "#errors .error-message")
    assert len(messages) == 5 and all(XSS in m.text for m in messages)
    assert "<script>document.title=" in css(browser, "#args")[0].text  # JSON-quoted
    assert not css(browser, "#live script") and not css(browser, "#live img")
    browser.get(f"{read_only.url}/jobs?state=discarded")
    assert XSS[:40] in css(browser, "#jobs")[0].text
    assert browser.title == "Jobs · supervisor"


def test_retry_is_refused_without_the_token_and_done_with_it(browser, acting, seeded):
    dsn, ids = seeded
    job = ids["discarded_binding"]
    browser.get(f"{acting.url}/jobs/{job}")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    css(browser, "#retry")[0].click()
    wait_for(lambda: css(browser, "#error"), what="the refusal page")
    assert "needs the dashboard token" in css(browser, "#error")[0].text
    assert state_of(dsn, job) == "discarded"

    browser.get(f"{acting.url}/jobs/{job}")
    box = css(browser, "#token")[0]
    box.send_keys("not-it")
    css(browser, "#retry")[0].click()
    wait_for(lambda: css(browser, "#error"), what="the refusal page")
    assert "wrong dashboard token" in css(browser, "#error")[0].text
    assert state_of(dsn, job) == "discarded"

    browser.get(f"{acting.url}/jobs/{job}")
    box = css(browser, "#token")[0]
    box.clear()
    box.send_keys(TOKEN)
    css(browser, "#retry")[0].click()
    wait_for(lambda: "done=retried" in browser.current_url, what="the job page after retry")
    assert css(browser, "#state")[0].text == "available"
    assert "runs again" in css(browser, "#notice")[0].text
    assert state_of(dsn, job) == "available"
    assert not browser.get_cookies()


def test_pause_from_the_queues_page_with_the_token(browser, acting, seeded):
    dsn, _ids = seeded
    browser.get(acting.url + "/")
    browser.execute_script("sessionStorage.setItem(arguments[0], arguments[1])",
                           "supervisor-dashboard-token", TOKEN)
    browser.refresh()
    row = next(r for r in css(browser, "#queues tbody tr")
               if r.get_attribute("data-queue") == "reports")
    row.find_element("css selector", "button").click()
    wait_for(lambda: "done=paused" in browser.current_url, what="the queues page after pause")
    with psycopg.connect(dsn, autocommit=True) as conn:
        paused = conn.execute("SELECT paused FROM supervisor.queues WHERE name = 'reports'"
                              ).fetchone()[0]
    assert paused is True


def test_pages_refresh_themselves_without_a_reload(browser, read_only, seeded):
    dsn, _ids = seeded
    browser.get(read_only.url + "/jobs?queue=fresh")
    assert css(browser, "#no-jobs")
    browser.execute_script("window.__sameDocument = true")
    with psycopg.connect(dsn, autocommit=True) as conn:
        new_id = conn.execute("INSERT INTO supervisor.jobs (kind, queue) "
                              "VALUES ('arrived', 'fresh') RETURNING id").fetchone()[0]
    wait_for(lambda: css(browser, f'#jobs tr[data-job="{new_id}"]'), timeout=15,
             what="the new job to appear")
    assert browser.execute_script("return window.__sameDocument === true")
    assert int(css(browser, "#live")[0].get_attribute("data-refreshes")) >= 1

"""The operator's console in a real browser (Debian's Chromium through Selenium): a
queue's and a kind's charts drawn from the rollup, the supervisors page showing each
child of a real running supervisor (its job, for how long, its memory), and a batch's
ETA on the batches page; each at 420 px without sideways scrolling. Skipped only when
chromium or chromedriver is not installed."""

from __future__ import annotations

import signal

import psycopg
import pytest
from dashboard_browser import missing
from dashboard_seed import DashboardProcess
from e2e import Supervisor
from test_dashboard_browser import css, wait_for

from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180),
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]
pytest_plugins = ["dashboard_fixtures"]  # pages

_HISTORY = """
INSERT INTO supervisor.job_minutes (minute, queue, kind, completed, discarded, retried,
                                    run_sum, run_n, run_p95, wait_sum, wait_n,
                                    cpu_seconds, max_rss_bytes)
SELECT date_trunc('minute', now()) - g * interval '1 minute', 'images', 'resize',
       20 + g % 7, CASE WHEN g BETWEEN 10 AND 14 THEN 5 ELSE 0 END, 1,
       40.0, 20, 2.5, 10.0, 20, CASE WHEN g = 3 THEN 90.0 ELSE 30.0 END, 64 << 20
FROM generate_series(0, 300) AS g
ON CONFLICT DO NOTHING
"""
# From the current minute (g = 0) on, as _DEPTH below: the page shows the 60 minutes
# before the one it is drawn in, and when that minute turns over between this insert and
# the drawing, the seeded current minute is the window's last (without it a run_mean
# point was missing: 59 of 60, in one CI run).
_DEPTH = """
INSERT INTO supervisor.queue_minutes (minute, queue, available, running, oldest_wait)
SELECT date_trunc('minute', now()) - g * interval '1 minute', 'images', 100 - g % 50, 4,
       30.0 + g
FROM generate_series(0, 120) AS g
ON CONFLICT DO NOTHING
"""


def _fits(browser, url: str) -> None:
    browser.set_window_size(420, 900)
    try:
        browser.get(url)
        width = browser.execute_script("return document.documentElement.clientWidth")
        scroll = browser.execute_script("return document.documentElement.scrollWidth")
        assert scroll <= width + 1, (url, scroll, width)
        for chart in css(browser, "svg.chart"):  # charts shrink to the screen
            assert chart.size["width"] <= width, (url, chart.size)
    finally:
        browser.set_window_size(1280, 900)


def _text(browser, selector: str) -> str:
    """The element's text, read in one script: the page redraws its charts as it
    refreshes, and an element found, then read, could be gone between the two (a stale
    element reference, in one CI run)."""
    return browser.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''",
        selector)


def _series_points(browser, figure_id: str, series: str) -> int:
    return int(browser.execute_script(
        "const f = document.getElementById(arguments[0]);"
        "return [...f.querySelectorAll('polyline.series-' + arguments[1])]"
        ".reduce((n, p) => n + p.points.numberOfItems, 0);", figure_id, series))


def test_queue_and_kind_pages_draw_their_charts(browser, pages):
    server, dsn, _ids = pages
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_HISTORY)
        conn.execute(_DEPTH)
    browser.get(server.url + "/")
    css(browser, 'tr[data-queue="images"] a')[0].click()  # the queue's name opens its page
    wait_for(lambda: browser.current_url.endswith("/queues/images"), what="the queue page")
    figures = css(browser, "figure.chart-box")
    assert len(figures) == 10
    for figure in figures:
        assert figure.find_element("css selector", "svg").size["width"] > 200
    # Every minute of the hour and every hour of the day has a point.
    assert _series_points(browser, "chart-finished-hour", "completed") == 60
    assert _series_points(browser, "chart-finished-day", "completed") == 24
    assert _series_points(browser, "chart-times-hour", "run_mean") == 60
    assert _series_points(browser, "chart-depth-hour", "available") == 60
    assert "failed 25" in _text(browser, "#chart-finished-hour")
    assert "run mean max 2.0s" in _text(browser, "#chart-times-hour")
    assert "available max 100" in _text(browser, "#chart-depth-hour")
    assert _series_points(browser, "chart-cpu-hour", "cpu_seconds") == 60
    assert "CPU 31.0m" in _text(browser, "#chart-cpu-hour")  # 59 minutes of 30 s, one of 90 s
    assert browser.title != "pwned"
    css(browser, 'tr[data-kind="resize"] a')[0].click()
    wait_for(lambda: browser.current_url.endswith("/kinds/resize"), what="the kind page")
    assert len(css(browser, "figure.chart-box")) == 6
    assert _series_points(browser, "chart-cpu-day", "cpu_seconds") == 24
    assert "64 MiB" in _text(browser, "#kind-queues")  # the day's peak memory
    assert _series_points(browser, "chart-finished-hour", "failed") == 60
    assert "images" in _text(browser, "#kind-queues")
    _fits(browser, server.url + "/queues/images")
    _fits(browser, server.url + "/kinds/resize")


def test_the_supervisors_page_shows_each_child_of_a_running_supervisor(browser, dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue("e2e_sleep", {"seconds": 60}, conn=conn)
    sup = Supervisor(dsn, "-n", "2")
    server = DashboardProcess(dsn, None, refresh=0.5)
    try:
        browser.get(server.url + "/supervisors")

        def children():
            # Read in one go: the page refreshes itself every half second.
            return browser.execute_script(
                "return [...document.querySelectorAll('table.children tbody tr')]"
                ".map(r => [...r.cells].map(c => c.innerText.trim()))")

        def busy():
            rows = [r for r in children() if r[3].startswith(str(job_id))]
            return rows[0] if rows else None

        row = wait_for(busy, timeout=60, what="the busy child on the page")
        assert (row[2], row[4], row[5]) == ("busy", "e2e_sleep", "default")
        assert "MiB" in row[7]
        assert {int(r[1]) for r in children()} == set(sup.children())
        # "running for" grows with the next heartbeats (the page refreshes itself).
        wait_for(lambda: (busy() or row)[6] != row[6], timeout=30,
                 what="running for to grow")
        browser.execute_script(
            "document.querySelector('table.children a[href=\"/jobs/' + arguments[0]"
            " + '\"]').click()", job_id)
        wait_for(lambda: browser.current_url.endswith(f"/jobs/{job_id}"), what="the job")
        _fits(browser, server.url + "/supervisors")
    finally:
        sup.signal(signal.SIGKILL)
        sup.stop()
        server.close()


def test_a_batch_shows_its_eta_from_run_times_and_children(browser, dsn):
    batch = enqueue_many("bt_member", [{"n": i} for i in range(6)], queue="bq",
                         then=Callback("bt_callback", {}, queue="bq"), dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE supervisor.jobs SET state = 'completed', "
                     "attempted_at = now() - interval '3 seconds', finished_at = now() "
                     "WHERE id = ANY(%s)", (batch.ids[:2],))
        conn.execute("INSERT INTO supervisor.supervisors (id, host, pid, queues, children) "
                     "VALUES ('w1', 'worker-1', 99, '{bq}', 2)")
    server = DashboardProcess(dsn, None, refresh=0)
    try:
        browser.get(server.url + "/batches")
        row = css(browser, f'tr[data-batch="{batch.id}"]')[0]
        eta = row.find_element("css selector", "td.eta").text
        # 4 left x 3 s mean / 2 children serving the queue.
        assert eta.startswith("6.0s") and "mean 3.0s" in eta and "2 children" in eta
        assert batch.eta() == pytest.approx(6.0, rel=0.01)
        _fits(browser, server.url + "/batches")
    finally:
        server.close()

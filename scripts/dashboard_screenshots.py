"""Screenshots of the dashboard's main pages into docs/images/ (PNG).

Creates a scratch database on a PostgreSQL server, migrates it, fills it with jobs in
every state (the same data the browser tests use, tests/dashboard_seed.py), runs the
real ``supervisor dashboard`` over it with a token, and photographs each page with
headless Chromium from the Debian packages (never a downloaded browser). The scratch
database is dropped at the end.

    .venv/bin/python scripts/dashboard_screenshots.py [--server DSN] [--out docs/images]
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from dashboard_browser import missing, start_browser  # noqa: E402
from dashboard_seed import TOKEN, DashboardProcess, seed, seed_pages  # noqa: E402

from shared.migrate import migrate  # noqa: E402

PAGES = [  # (file name, path; {name} is a seeded job id)
    ("dashboard-queues.png", "/"),
    ("dashboard-jobs.png", "/jobs"),
    ("dashboard-jobs-filtered.png", "/jobs?queue=images&state=running"),
    ("dashboard-job.png", "/jobs/{retryable}"),
    ("dashboard-job-escaped.png", "/jobs/{discarded}"),
    ("dashboard-supervisors.png", "/supervisors"),
    ("dashboard-schedules.png", "/schedules"),
    ("dashboard-batches.png", "/batches"),
    ("dashboard-kinds.png", "/kinds"),
    ("dashboard-limits.png", "/limits"),
    ("dashboard-jobs-search.png", "/jobs?q=relay+refused"),
    ("dashboard-bulk.png", "/jobs/bulk/retry?state=discarded"),
    ("dashboard-queue.png", "/queues/images"),
    ("dashboard-kind.png", "/kinds/resize"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a PostgreSQL to create the scratch database on")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    if missing():
        print(f"dashboard_screenshots: {missing()}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"supervisor_shots_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(args.server, dbname=name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
            ids = seed(conn) | seed_pages(conn)
            # An hour of history for the chart: a steady stream with a failure spike.
            conn.execute("""INSERT INTO supervisor.job_minutes
                (minute, queue, kind, completed, discarded, retried)
                SELECT date_trunc('minute', now()) - g * interval '1 minute', 'images',
                       'resize', 40 + (g * 7) % 13, CASE WHEN g BETWEEN 20 AND 24 THEN 9
                       ELSE g % 3 END, g % 4
                FROM generate_series(1, 59) AS g""")
            history(conn)
        shoot(dsn, ids, args.out)
    finally:
        with psycopg.connect(args.server, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
    return 0


def history(conn: psycopg.Connection) -> None:
    """A day of history for the queue and kind pages: run and wait times by minute,
    finished jobs by hour with a failing stretch at night, and the images queue's depth
    once a minute (a backlog that builds at 02:00 and drains)."""
    conn.execute("""UPDATE supervisor.job_minutes SET run_sum = completed * (1.8 + (
                        extract(minute FROM minute)::int % 5) * 0.1), run_n = completed,
                        run_p95 = 3.1, wait_sum = completed * 0.4, wait_n = completed,
                        wait_p95 = 1.2""")
    conn.execute("""INSERT INTO supervisor.job_minutes
        (minute, queue, kind, completed, discarded, retried, run_sum, run_n, run_p95,
         wait_sum, wait_n)
        SELECT date_trunc('minute', now()) - g * interval '1 minute', 'images', 'resize',
               30 + (g * 5) % 11, CASE WHEN g BETWEEN 600 AND 720 THEN 6 ELSE g % 2 END,
               g % 3, 60.0, 30, 2.9, 12.0 + (g % 90), 30
        FROM generate_series(60, 1439, 7) AS g
        ON CONFLICT DO NOTHING""")
    conn.execute("""INSERT INTO supervisor.queue_minutes
        (minute, queue, available, running, oldest_wait)
        SELECT date_trunc('minute', now()) - g * interval '1 minute', 'images',
               greatest(0, 400 - abs(g - 700))::int + 6, 4, 60.0 + greatest(0, 400 - abs(g - 700))
        FROM generate_series(0, 1439) AS g""")


def shoot(dsn: str, ids: dict[str, int], out: Path) -> None:
    server = DashboardProcess(dsn, TOKEN, refresh=0)
    browser = start_browser(1280, 820)
    try:
        browser.get(server.url + "/")
        browser.execute_script("sessionStorage.setItem(arguments[0], arguments[1])",
                               "supervisor-dashboard-token", TOKEN)
        for filename, path in PAGES:
            browser.set_window_size(1280, 820)
            browser.get(server.url + path.format(**ids))
            height = browser.execute_script("return document.documentElement.scrollHeight")
            browser.set_window_size(1280, min(max(height + 140, 820), 1600))
            browser.execute_async_script(  # shoot once the page's fonts are in
                "document.fonts.ready.then(() => arguments[arguments.length - 1]())")
            browser.save_screenshot(str(out / filename))
            print(out / filename)
    finally:
        browser.quit()
        server.close()


if __name__ == "__main__":
    raise SystemExit(main())

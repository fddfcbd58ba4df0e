"""The dashboard's ``/jobs`` with many distinct queues (issue 50): how long the filter
form's list of queue names and the page's search take, without and with the optional
``(state, queue)`` index, and how long the old skip (one probe per pair, which without
the index reads the table per probe) takes, cut off at ``--cutoff`` seconds.

    .venv/bin/python scripts/bench_dashboard_queues.py [--dsn BASE] [--queues 20000]
        [--jobs 100000] [--cutoff 30]

Creates (and drops afterwards) the database ``bench_dashboard_queues`` on BASE's server.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared.migrate import migrate
from supervisor.dashboard import queries

NAME = "bench_dashboard_queues"
OLD_SKIP = """
WITH RECURSIVE p(state, queue) AS (
    (SELECT state, queue FROM supervisor.jobs ORDER BY state, queue LIMIT 1)
    UNION ALL
    SELECT n.state, n.queue FROM p CROSS JOIN LATERAL (
        SELECT j.state, j.queue FROM supervisor.jobs j
        WHERE (j.state, j.queue) > (p.state, p.queue)
        ORDER BY j.state, j.queue LIMIT 1) AS n
)
SELECT name FROM supervisor.queues UNION SELECT queue FROM p ORDER BY 1
"""


def timed(func, *args) -> tuple[float, object]:
    began = time.perf_counter()
    value = func(*args)
    return time.perf_counter() - began, value


def measure(conn: psycopg.Connection, label: str, cutoff: float) -> None:
    seconds, names = timed(queries.queue_names, conn)
    print(f"{label}: queue_names {seconds:.3f} s ({len(names)} names, capped at "
          f"{queries.QUEUE_CHOICES + 1})")
    seconds, _found = timed(queries.jobs, conn, queries.parse_filters({}))
    print(f"{label}: the page's search {seconds:.3f} s")
    conn.execute(f"SET statement_timeout = '{int(cutoff * 1000)}ms'")
    try:
        seconds, rows = timed(lambda: conn.execute(OLD_SKIP).fetchall())
        print(f"{label}: the old skip {seconds:.3f} s ({len(rows)} names)")
    except psycopg.errors.QueryCanceled:
        print(f"{label}: the old skip did not finish within {cutoff:g} s")
    conn.execute("RESET statement_timeout")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1/postgres")
    parser.add_argument("--queues", type=int, default=20_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--cutoff", type=float, default=30.0)
    options = parser.parse_args()
    with psycopg.connect(options.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(NAME)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(NAME)))
    try:
        with psycopg.connect(make_conninfo(options.dsn, dbname=NAME), autocommit=True) as conn:
            migrate(conn)
            conn.execute(
                "INSERT INTO supervisor.jobs (kind, queue, state) SELECT 'k', 'q' || "
                "(g %% %(q)s), (ARRAY['available','completed','discarded'])[1 + g %% 3] "
                "FROM generate_series(1, %(n)s) g", {"q": options.queues, "n": options.jobs})
            conn.execute("ANALYZE supervisor.jobs")
            print(f"{options.jobs} jobs in {options.queues} queues, three states")
            measure(conn, "no index", options.cutoff)
            conn.execute("CREATE INDEX jobs_state_queue_idx ON supervisor.jobs (state, queue)")
            conn.execute("ANALYZE supervisor.jobs")
            measure(conn, "with jobs_state_queue_idx", options.cutoff)
    finally:
        with psycopg.connect(options.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(NAME)))


if __name__ == "__main__":
    main()

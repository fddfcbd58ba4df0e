"""How long the dashboard takes to answer, with a connection per request, over a table
of a given size: median and 95th percentile per page, sequential requests.

Creates a scratch database, seeds the dashboard tests' jobs plus ``--rows`` completed
jobs, runs the real ``supervisor dashboard``, then times each page. Dropped at the end.

    .venv/bin/python scripts/bench_dashboard.py [--rows 100000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from dashboard_seed import DashboardProcess, seed  # noqa: E402

from shared.migrate import migrate  # noqa: E402

PAGES = ["/", "/api/queues", "/jobs", "/jobs?state=discarded", "/jobs?q=relay+refused",
         "/jobs?q=no-such-text", "/jobs/{discarded}", "/supervisors"]

_BULK = """
INSERT INTO supervisor.jobs (kind, queue, args, state, attempt, finished_at, result)
SELECT 'bulk', 'bulk' || (g %% 4), jsonb_build_object('i', g, 'path', 'p/' || g || '.png'),
       'completed', 1, now() - (g || ' seconds')::interval, '{"ok": true}'
FROM generate_series(1, %(rows)s) AS g
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    name = f"supervisor_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(args.server, dbname=name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
            ids = seed(conn)
            conn.execute(_BULK, {"rows": args.rows})
            conn.execute("ANALYZE supervisor.jobs")
        server = DashboardProcess(dsn, None, refresh=0)
        try:
            print(f"{args.rows + len(ids)} jobs, {args.repeat} sequential requests per page")
            print(f"{'page':32} {'median ms':>10} {'p95 ms':>8}")
            for page in PAGES:
                url = server.url + page.format(**ids)
                times = []
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    with urllib.request.urlopen(url, timeout=30) as response:
                        response.read()
                    times.append((time.perf_counter() - start) * 1000)
                times.sort()
                p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
                print(f"{page.format(**ids):32} {statistics.median(times):10.1f} {p95:8.1f}")
        finally:
            server.close()
    finally:
        with psycopg.connect(args.server, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

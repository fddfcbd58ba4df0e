"""Every dashboard page and API call over 1,000,000 jobs: median and 95th percentile
of sequential requests to the real ``supervisor dashboard``, and how long
``supervisor migrate`` takes to build migration 0013's indexes on that table.

Seeds a scratch database with ``--rows`` jobs spread over 30 days, 8 queues and 40
kinds, in every state (about 3 % discarded with error messages, args with a user id),
so searches by id, text and args have real work to do. ``--keep`` leaves the database
for another run, which ``--reuse`` then times again without seeding.

    .venv/bin/python scripts/bench/dashboard_scale.py [--rows 1000000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from dashboard_seed import DashboardProcess  # noqa: E402

from shared.migrate import migrate  # noqa: E402

NAME = "supervisor_bench_dashboard_scale"
SEARCH_VERSION = 13  # the migration with the search indexes

# States by share of rows: mostly finished work, as in a table kept for 30 days.
_SEED = """
INSERT INTO supervisor.jobs (kind, queue, args, state, attempt, max_attempts, run_at,
    created_at, attempted_at, finished_at, lease_owner, lease_expires_at, errors, result)
SELECT 'app.tasks.' || (ARRAY['resize', 'send_email', 'render_pdf', 'index_doc',
        'sync_account', 'thumbnail', 'transcode', 'export_csv'])[1 + g %% 8] || '_' || (g %% 5),
       'q' || (g %% 8),
       jsonb_build_object('user', g %% 10000, 'path', 'p/' || g || '.png'),
       s.state,
       CASE WHEN s.state IN ('available', 'scheduled') THEN 0 ELSE 1 END, 5,
       t.created + CASE WHEN s.state = 'scheduled' THEN interval '40 days' ELSE interval '0' END,
       t.created,
       CASE WHEN s.state = 'running' AND g %% 2 = 0 THEN NULL
            WHEN s.state IN ('available', 'scheduled') THEN NULL
            ELSE t.created + interval '1 second' END,
       CASE WHEN s.state IN ('completed', 'discarded', 'cancelled')
            THEN t.created + interval '3 seconds' END,
       CASE WHEN s.state = 'running' THEN 'bench:1:x' END,
       CASE WHEN s.state = 'running' THEN now() + interval '1 hour' END,
       CASE WHEN s.state IN ('discarded', 'retryable') THEN jsonb_build_array(jsonb_build_object(
            'attempt', 1, 'kind', 'error', 'at', t.created,
            'message', (ARRAY['connection refused by relay ', 'timeout talking to bucket ',
                              'cannot open missing_', 'quota exceeded for account '])
                       [1 + g %% 4] || (g %% 97)))
            ELSE '[]'::jsonb END,
       CASE WHEN s.state = 'completed' THEN '{"ok": true}'::jsonb END
FROM generate_series(1, %(rows)s) AS g
CROSS JOIN LATERAL (SELECT now() - interval '30 days' * (1 - g::float8 / %(rows)s)
                    AS created) AS t
CROSS JOIN LATERAL (SELECT CASE
    WHEN g %% 1000 < 900 THEN 'completed' WHEN g %% 1000 < 930 THEN 'discarded'
    WHEN g %% 1000 < 960 THEN 'available' WHEN g %% 1000 < 975 THEN 'scheduled'
    WHEN g %% 1000 < 980 THEN 'running' WHEN g %% 1000 < 990 THEN 'retryable'
    ELSE 'cancelled' END AS state) AS s
"""

ROUTES = [
    "/", "/api/status", "/api/queues", "/supervisors", "/api/supervisors",
    "/jobs", "/api/jobs", "/jobs?state=discarded", "/jobs?queue=q3&state=available",
    "/jobs?kind=app.tasks.resize_0", "/jobs?q={some_id}", "/api/jobs?q={some_id}",
    "/jobs?q=relay+refused", "/jobs?q=no-such-text", "/jobs?q=send_email",
    "/jobs?q=%7B%22user%22%3A+42%7D", "/api/jobs?q=%7B%22user%22%3A+42%7D",
    "/jobs?q=quota&state=discarded&sort=oldest",
    "/jobs?created_after={week_ago}&created_before={day_ago}",
    "/jobs/{some_id}", "/api/jobs/{some_id}",
    "/kinds", "/schedules", "/batches", "/limits",
    "/api/jobs/bulk/retry?state=discarded", "/jobs/bulk/retry?kind=app.tasks.resize_0",
    # The console's pages (issue 29): one queue, one kind, their charts, forecasts.
    "/queues/q3", "/api/queues/q3", "/kinds/app.tasks.resize_0",
    "/api/kinds/app.tasks.resize_0", "/api/history?minutes=1440", "/metrics",
    "/api/batches",
]

# The history behind the charts: the 30 days of seeded jobs rolled up as the leader
# would (in one go here), a depth sample per queue and minute for 30 days, and four
# live supervisors of 16 children each publishing their children.
_DEPTH = """
INSERT INTO supervisor.queue_minutes (minute, queue, available, running, oldest_wait)
SELECT date_trunc('minute', now()) - m * interval '1 minute', 'q' || q,
       100 + (m * 7 + q) % 500, 4, 30.0 + m % 600
FROM generate_series(0, 30 * 1440 - 1) AS m, generate_series(0, 7) AS q
"""
_SUPERVISOR = """
INSERT INTO supervisor.supervisors (id, host, pid, queues, children, busy, info)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, 16, 16, %(info)s)
"""


OPTIONAL_INDEXES = (
    "CREATE INDEX IF NOT EXISTS jobs_kind_idx ON supervisor.jobs (kind, id)",
    "CREATE INDEX IF NOT EXISTS jobs_args_idx ON supervisor.jobs USING gin (args jsonb_path_ops)",
    "CREATE INDEX IF NOT EXISTS jobs_state_queue_idx ON supervisor.jobs (state, queue)",
)


def seed(base: str, rows: int) -> tuple[str, float]:
    """A fresh database with ``rows`` jobs, migrated to just before the search indexes;
    then the seconds ``migrate`` takes to build them over those rows."""
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{NAME}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{NAME}"')
    dsn = make_conninfo(base, dbname=NAME)
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        # Seed under the older schema, then time the migration as an upgrade would run.
        conn.execute("""DROP INDEX IF EXISTS supervisor.jobs_kind_idx,
            supervisor.jobs_args_idx, supervisor.jobs_error_words_idx,
            supervisor.jobs_state_queue_idx, supervisor.jobs_created_brin""")
        conn.execute("DELETE FROM supervisor.migrations WHERE version = %s",
                     (SEARCH_VERSION,))
        start = time.perf_counter()
        conn.execute(_SEED, {"rows": rows})
        print(f"seeded {rows} jobs in {time.perf_counter() - start:.0f} s", flush=True)
        conn.execute("VACUUM ANALYZE supervisor.jobs")
        start = time.perf_counter()
        migrate(conn)
        took = time.perf_counter() - start
        # The indexes docs/dashboard.md gives for big tables ("Indexes for big tables").
        for statement in OPTIONAL_INDEXES:
            conn.execute(statement)
        conn.execute("VACUUM ANALYZE supervisor.jobs")
        seed_history(conn)
    return dsn, took


def seed_history(conn: psycopg.Connection) -> None:
    """The rollup of every seeded job, 30 days of depth samples, live supervisors."""
    from psycopg.types.json import Jsonb

    from supervisor.db.history import roll_up

    start = time.perf_counter()
    conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = now() - interval '31 days'")
    roll_up(conn, lag=-60, slice_seconds=32 * 86400.0)
    conn.execute(_DEPTH)
    for n in range(4):
        children = [{"worker": w, "pid": 1000 * n + w, "state": "busy", "job_id": w,
                     "kind": "app.tasks.resize_0", "queue": f"q{w % 8}", "attempt": 1,
                     "job_seconds": 1.5, "held": 2, "rss_bytes": 80_000_000,
                     "jobs_done": 500, "age_seconds": 3600.0} for w in range(1, 17)]
        conn.execute(_SUPERVISOR, {"id": f"bench-{n}", "host": f"host-{n}", "pid": 100 + n,
                                   "queues": [f"q{q}" for q in range(8)],
                                   "info": Jsonb({"children": children})})
    conn.execute("VACUUM ANALYZE supervisor.job_minutes, supervisor.queue_minutes")
    rows = conn.execute("SELECT count(*) FROM supervisor.job_minutes").fetchone()
    print(f"history: {rows[0] if rows else 0} rolled-up minutes, 30 days of depth "
          f"samples, in {time.perf_counter() - start:.0f} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", action="store_true", help="time a kept database again")
    args = parser.parse_args()
    if args.reuse:
        dsn = make_conninfo(args.server, dbname=NAME)
    else:
        dsn, took = seed(args.server, args.rows)
        print(f"supervisor migrate (0013, five indexes) over the seeded table: {took:.1f} s")
    with psycopg.connect(dsn, autocommit=True) as conn:
        total, some_id = conn.execute(
            "SELECT count(*), max(id) - 12345 FROM supervisor.jobs").fetchone()
        week_ago, day_ago = conn.execute(
            "SELECT to_char(now() - interval '7 days', 'YYYY-MM-DD'), "
            "to_char(now() - interval '1 day', 'YYYY-MM-DD')").fetchone()
    fill = {"some_id": some_id, "week_ago": week_ago, "day_ago": day_ago}
    server = DashboardProcess(dsn, None, refresh=0)
    worst = 0.0
    try:
        print(f"{total} jobs, {args.repeat} sequential requests per route (ms)")
        print(f"{'route':58} {'median':>7} {'p95':>7}")
        for route in ROUTES:
            path = route.format(**fill)
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                with urllib.request.urlopen(server.url + path, timeout=60) as response:
                    response.read()
                times.append((time.perf_counter() - start) * 1000)
            times.sort()
            p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
            worst = max(worst, p95)
            print(f"{path:58} {statistics.median(times):7.1f} {p95:7.1f}", flush=True)
    finally:
        server.close()
        if not args.keep:
            with psycopg.connect(args.server, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{NAME}" WITH (FORCE)')
    print(f"worst p95: {worst:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

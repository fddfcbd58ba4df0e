"""Fan-in by ``depends_on`` (issue 24): completing N jobs with and without one job that
depends on all of them, on the schema before (0008) and after (0009), same run.

Each variant inserts N available jobs, marks them running, then completes them the way
the parent does (``UPDATE ... SET state = 'completed' WHERE id = ANY(batch)``, one
statement per batch of ``--batch`` ids) and reports completions per second and the rows
the server read (``pg_stat_user_tables``: sequential plus index fetches, every table of
the schema). On 0008 the dependent is held as 0008's producer held it (``depends_on``
array, its dependencies marked ``watched``); on 0009 it is enqueued by today's code.

Usage: python scripts/bench/fan_in.py [--dsn DSN] [--jobs 2000 8000] [--batch 16]
       [--schemas 8 9]
"""

from __future__ import annotations

import argparse
import time

import common
import psycopg
from legacy_schema import migrate_the_old_way
from psycopg.conninfo import make_conninfo

from shared.enqueue import enqueue
from shared.migrate import BASELINE_VERSION, available_migrations, migrate

HOLD = "9999-12-31 00:00:00+00"
_READ = """
SELECT sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::bigint
FROM pg_stat_user_tables WHERE schemaname = 'supervisor'
"""


def database_at(base_dsn: str, name: str, version: int) -> str:
    """A fresh database with the migrations up to ``version`` applied (before the
    baseline: the old files, from git history)."""
    common.drop_database(base_dsn, name)
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(base_dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if version >= BASELINE_VERSION:
            migrate(conn)
        else:  # the files from before the baseline, from git history
            migrate_the_old_way(conn, upto=version)
    return dsn


def run(dsn: str, version: int, jobs: int, batch: int, dependent: bool) -> tuple[float, int]:
    """(completions per second, rows read) for one variant."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE supervisor.jobs")
        if version >= 9:
            conn.execute("TRUNCATE supervisor.job_dependencies, supervisor.dependents")
        ids = [r[0] for r in conn.execute(
            "INSERT INTO supervisor.jobs (kind, queue, state) SELECT 'k', 'fan', 'running' "
            "FROM generate_series(1, %s) RETURNING id", (jobs,)).fetchall()]
        if dependent and version >= 9:
            enqueue("k", {}, queue="fan", depends_on=ids, dsn=dsn)
        elif dependent:
            conn.execute("UPDATE supervisor.jobs SET watched = true WHERE id = ANY(%s)", (ids,))
            conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, run_at, depends_on) "
                         "VALUES ('k', 'fan', 'scheduled', %s, %s)", (HOLD, ids))
        conn.execute("VACUUM ANALYZE supervisor.jobs")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        before = conn.execute(_READ).fetchone()[0]
        start = time.perf_counter()
        for i in range(0, jobs, batch):
            conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                         "WHERE id = ANY(%s) AND state = 'running'", (ids[i:i + batch],))
        elapsed = time.perf_counter() - start
        if dependent:
            held = conn.execute("SELECT count(*) FROM supervisor.jobs "
                                "WHERE state = 'available'").fetchone()[0]
            assert held == 1, "the dependent was not released"
        # A backend flushes its table statistics at a transaction's end at most once a
        # second (PostgreSQL 15): wait that second, end one more, then read.
        time.sleep(1.1)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        after = conn.execute(_READ).fetchone()[0]
    return jobs / elapsed, after - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, nargs="+", default=[2000, 8000])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--schemas", type=int, nargs="+",
                        help="schema versions to compare (default: 8 and the latest)")
    options = parser.parse_args()
    latest = available_migrations()[-1].version
    print(f"{'schema':>6} {'jobs':>6} {'dependent':>9} {'jobs/s':>8} {'rows read':>10} "
          f"{'rows/job':>8}")
    for version in options.schemas or (8, latest):
        name = f"bench_fan_in_{version}"
        dsn = database_at(options.dsn, name, version)
        try:
            for jobs in options.jobs:
                for dependent in (False, True):
                    rate, read = run(dsn, version, jobs, options.batch, dependent)
                    print(f"{version:>6} {jobs:>6} {'yes' if dependent else 'no':>9} "
                          f"{rate:>8.0f} {read:>10} {read / jobs:>8.1f}", flush=True)
        finally:
            common.drop_database(options.dsn, name)


if __name__ == "__main__":
    main()

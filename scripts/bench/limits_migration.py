"""What schema 0022 (issue 50: bounded names and error text) costs: migrating a table
that already holds a history, and the error cap on each failure written.

A scratch database is migrated to 0021, filled with ``--finished`` completed jobs and
``--live`` available ones (a few of them with keys longer than 0022 allows), analyzed,
and then migrated to 0022 (and any later files), timed. The migration's mending UPDATE
reads live jobs through the partial indexes of 0001, so its cost follows the live jobs,
not the history. Then ``supervisor.capped_errors`` is timed against the bare append on
``--rows`` small errors arrays (the common failure: within bounds, returned unchanged).

Usage: python scripts/bench/limits_migration.py [--finished 1000000] [--live 20000]
"""

from __future__ import annotations

import time

import psycopg
from common import cli, drop_database, machine
from legacy_schema import migrate_the_old_way
from psycopg.conninfo import make_conninfo

from shared.migrate import migrate

NAME = "bench_limits_migration"
SMALL = ('[{"attempt": 1, "kind": "error", "message": "boom", "traceback": "Traceback"},'
         ' {"attempt": 2, "kind": "error", "message": "boom", "traceback": "Traceback"}]')


def run(dsn: str, finished: int, live: int, rows: int):
    facts = machine(dsn)
    yield "machine", f"{facts['cpu']}, load {facts['load']}"
    drop_database(dsn, NAME)
    with psycopg.connect(dsn, autocommit=True) as base:
        base.execute(f'CREATE DATABASE "{NAME}"')
    scratch = make_conninfo(dsn, dbname=NAME)
    try:
        with psycopg.connect(scratch, autocommit=True) as conn:
            migrate_the_old_way(conn, upto=21)  # the files before the baseline (git)
            conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, finished_at) "
                         "SELECT 'k', 'q', 'completed', now() "
                         "FROM generate_series(1, %s)", (finished,))
            conn.execute("INSERT INTO supervisor.jobs (kind, queue, concurrency_key) "
                         "SELECT 'k', 'q', CASE WHEN g %% 1000 = 0 THEN repeat(md5(g::text), 100)"
                         " END FROM generate_series(1, %s) g", (live,))
            conn.execute("VACUUM ANALYZE supervisor.jobs")
            began = time.perf_counter()
            applied = migrate_the_old_way(conn) + [m.version for m in migrate(conn)]
            took = time.perf_counter() - began
            yield (f"migrate {applied} on {finished:,} finished + {live:,} live jobs",
                   f"{took * 1000:.0f} ms")
            for label, query in (
                    ("append only", "SELECT count(%s::jsonb || jsonb_build_array(g)) "
                                    "FROM generate_series(1, %s) g"),
                    ("capped_errors(append)",
                     "SELECT count(supervisor.capped_errors(%s::jsonb || jsonb_build_array(g)))"
                     " FROM generate_series(1, %s) g")):
                began = time.perf_counter()
                conn.execute(query, (SMALL, rows)).fetchone()
                per_row = (time.perf_counter() - began) / rows * 1e6
                yield f"{label}, a 3-entry errors array, per row", f"{per_row:.1f} us"
    finally:
        drop_database(dsn, NAME)


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0], finished=1_000_000, live=20_000, rows=50_000)

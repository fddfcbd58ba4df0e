"""Benchmark the queue core: enqueue_many, single enqueue, and the store's claim+complete
against a hand-written SQL loop doing the same work in the same run.

    python scripts/bench_enqueue.py [--dsn DSN] [--jobs 20000] [--runs 3]

Creates a scratch database next to the one the DSN names (dropped at the end), so it
never touches real jobs. Prints a markdown table of medians.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from shared.dsn import resolve_dsn
from shared.enqueue import enqueue, enqueue_many
from shared.migrate import migrate
from supervisor.db.store import Completion, Store

HAND_CLAIM = """
UPDATE supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = now(), lease_owner = 'hand',
    lease_expires_at = now() + interval '30 seconds', heartbeat_at = now()
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = 'default' AND run_at <= now()
    ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED))
RETURNING id, args::text
"""
HAND_COMPLETE = """
UPDATE supervisor.jobs SET state = 'completed', finished_at = now(), lease_owner = NULL,
    lease_expires_at = NULL
WHERE id = ANY(%s)
"""


def timed(func: Callable[[], int], setup: Callable[[], object] | None = None) -> float:
    """Jobs per second of one call of ``func`` (which returns how many jobs it did);
    ``setup`` runs first, untimed."""
    if setup is not None:
        setup()
    start = time.perf_counter()
    count = func()
    return count / (time.perf_counter() - start)


def reset(conn: psycopg.Connection) -> None:
    conn.execute("TRUNCATE supervisor.jobs")
    conn.execute("VACUUM ANALYZE supervisor.jobs")


def seed(conn: psycopg.Connection, count: int) -> None:
    reset(conn)
    enqueue_many("noop", [{"i": i} for i in range(count)], conn=conn)
    conn.execute("ANALYZE supervisor.jobs")


def store_loop(conn: psycopg.Connection, batch: int) -> int:
    store = Store(conn, "bench")
    done = 0
    while jobs := store.claim("default", ["noop"], batch):
        store.complete([Completion(j.id, j.attempt, None) for j in jobs])
        done += len(jobs)
    return done


def hand_loop(conn: psycopg.Connection, batch: int) -> int:
    done = 0
    while rows := conn.execute(HAND_CLAIM, (batch,), prepare=True).fetchall():
        conn.execute(HAND_COMPLETE, ([r[0] for r in rows],), prepare=True)
        done += len(rows)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--single", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()

    base = resolve_dsn(options.dsn)
    name = f"supervisor_bench_{os.getpid()}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        server_version = admin.info.server_version
    dsn = make_conninfo(base, dbname=name)
    try:
        rows = run(dsn, options)
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, PostgreSQL {server_version // 10000}; "
          f"medians of {options.runs} runs")
    print()
    print("| measurement | jobs/s |")
    print("|---|---|")
    for label, value in rows:
        print(f"| {label} | {value} |")


def run(dsn: str, options: argparse.Namespace) -> list[tuple[str, str]]:
    results: list[tuple[str, str]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)

        def bulk() -> int:
            enqueue_many("noop", [{"i": i} for i in range(options.jobs)], dsn=dsn)
            return options.jobs

        bulk()  # warm-up: connection, caches
        rate = statistics.median(timed(bulk, lambda: reset(conn)) for _ in range(options.runs))
        results.append((f"enqueue_many, {options.jobs} jobs (COPY)", f"{rate:,.0f}"))

        def single() -> int:
            for i in range(options.single):
                enqueue("noop", {"i": i}, dsn=dsn)
            return options.single

        rate = statistics.median(timed(single, lambda: reset(conn)) for _ in range(options.runs))
        results.append((f"enqueue, one at a time, {options.single} jobs", f"{rate:,.0f}"))

        for batch in (1, 16, 128, 512):
            count = options.single if batch == 1 else options.jobs
            store_rates, hand_rates = [], []
            for _ in range(options.runs):  # interleaved so load drifts hit both alike
                seed_it = lambda c=count: seed(conn, c)  # noqa: E731
                store_rates.append(timed(lambda b=batch: store_loop(conn, b), seed_it))
                hand_rates.append(timed(lambda b=batch: hand_loop(conn, b), seed_it))
            s, h = statistics.median(store_rates), statistics.median(hand_rates)
            results.append((f"claim+complete batch {batch}, {count} jobs: store / hand SQL loop",
                            f"{s:,.0f} / {h:,.0f} ({s / h:.0%})"))
    return results


if __name__ == "__main__":
    main()

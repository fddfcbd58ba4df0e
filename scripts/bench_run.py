"""End-to-end throughput of ``supervisor run``, against its own limits, in one run.

* no-op jobs through ``supervisor run -n 2 --burst`` (start-up and shut-down included,
  timed from process start to exit), for a few prefetch settings;
* the store's own claim+complete loop (batch 512) on the same database: the ceiling the
  database puts on any supervisor;
* the pool's round trip with 2 children and a raw pipe ping-pong: the ceiling the pipes
  put on one-job-in-flight dispatch;
* CPU-bound jobs (tens of ms each) through ``supervisor run -n 2`` against
  ``multiprocessing.Pool(2)`` doing the same work: CPU efficiency.

Usage: python scripts/bench_run.py [--dsn DSN] [--jobs 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
sys.path[:0] = [str(SCRIPTS), str(ROOT)]

import bench_enqueue  # noqa: E402
import bench_pool  # noqa: E402
from bench_handlers import spin  # noqa: E402

from shared.enqueue import enqueue_many  # noqa: E402
from shared.migrate import migrate  # noqa: E402


def scratch_database(base_dsn: str, name: str) -> str:
    """Create (or recreate) a database for the benchmark and migrate it."""
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(base_dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
    return dsn


def reset(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE supervisor.jobs, supervisor.supervisors")
        conn.execute("VACUUM ANALYZE supervisor.jobs")


def run_supervisor(dsn: str, queue: str, children: int, *extra: str) -> float:
    """Seconds from starting ``supervisor run --burst`` to its exit."""
    env = dict(os.environ, SUPERVISOR_DSN=dsn,
               PYTHONPATH=os.pathsep.join([str(SCRIPTS), str(ROOT)]))
    cmd = [sys.executable, "-m", "supervisor", "run", "--app", "bench_handlers", "-q", queue,
           "-n", str(children), "--burst", "--log-level", "warning", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=str(SCRIPTS), capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"supervisor run failed ({proc.returncode}):\n{proc.stderr}")
    return elapsed


def noop_through_supervisor(dsn: str, jobs: int, prefetch: int) -> float:
    reset(dsn)
    enqueue_many("run_noop", [{}] * jobs, queue="bench", dsn=dsn)
    elapsed = run_supervisor(dsn, "bench", 2, "--prefetch", str(prefetch))
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state = 'completed'"
                            ).fetchone()[0]
    if done != jobs:
        raise SystemExit(f"only {done} of {jobs} jobs completed")
    return jobs / elapsed


def store_ceiling(dsn: str, jobs: int) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        bench_enqueue.reset(conn)
        bench_enqueue.seed(conn, jobs)
        t0 = time.perf_counter()
        done = bench_enqueue.store_loop(conn, 512)
        return done / (time.perf_counter() - t0)


def cpu_through_supervisor(dsn: str, tasks: list[int]) -> float:
    reset(dsn)
    enqueue_many("run_cpu", [{"n": n} for n in tasks], queue="bench_cpu", dsn=dsn)
    return run_supervisor(dsn, "bench_cpu", 2)


def cpu_through_multiprocessing(tasks: list[int]) -> float:
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(spin, tasks, chunksize=1)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--cpu-jobs", type=int, default=200)
    parser.add_argument("--cpu-iterations", type=int, default=400_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prefetch", type=int, nargs="*", default=[1, 16, 64])
    args = parser.parse_args()

    dsn = scratch_database(args.dsn, "supervisor_bench_run")
    rows: list[tuple[str, str]] = []
    med = statistics.median
    try:
        for prefetch in args.prefetch:
            rates = [noop_through_supervisor(dsn, args.jobs, prefetch) for _ in range(args.runs)]
            rows.append((f"no-op, `supervisor run -n 2 --burst --prefetch {prefetch}` "
                         f"({args.jobs} jobs, start-up included)", f"{med(rates):,.0f} jobs/s"))
        rates = [store_ceiling(dsn, args.jobs) for _ in range(args.runs)]
        rows.append(("store alone: claim+complete loop, batch 512", f"{med(rates):,.0f} jobs/s"))
        rates = [bench_pool.bench_pool(args.jobs, 2) for _ in range(args.runs)]
        rows.append(("pool alone: no-op round trips, 2 children", f"{med(rates):,.0f} /s"))
        rates = [bench_pool.bench_raw(args.jobs, 2) for _ in range(args.runs)]
        rows.append(("raw pipe ping-pong, 2 children, 1 in flight", f"{med(rates):,.0f} /s"))

        tasks = [args.cpu_iterations] * args.cpu_jobs
        ours = [cpu_through_supervisor(dsn, tasks) for _ in range(args.runs)]
        theirs = [cpu_through_multiprocessing(tasks) for _ in range(args.runs)]
        per_task = med(theirs) * 2 / len(tasks) * 1000
        rows.append((f"CPU-bound: {args.cpu_jobs} jobs of ~{per_task:.0f} ms, "
                     "`supervisor run -n 2` (start-up included)", f"{med(ours):.2f} s"))
        rows.append(("CPU-bound: same work, `multiprocessing.Pool(2).map`",
                     f"{med(theirs):.2f} s"))
        rows.append(("CPU efficiency (multiprocessing time / ours)",
                     f"{med(theirs) / med(ours):.3f}"))
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute('DROP DATABASE IF EXISTS "supervisor_bench_run" WITH (FORCE)')

    print(f"Machine: {bench_pool.machine()}; medians of {args.runs} runs\n")
    print("| measurement | result |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()

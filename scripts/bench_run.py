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
import sys
import time
from pathlib import Path

import psycopg

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
sys.path[:0] = [str(SCRIPTS), str(ROOT)]

sys.path.insert(0, str(SCRIPTS / "bench"))
import bench_enqueue  # noqa: E402
import bench_pool  # noqa: E402
import common  # noqa: E402
from bench_handlers import spin  # noqa: E402

from shared.enqueue import enqueue_many  # noqa: E402


def run_supervisor(dsn: str, queue: str, children: int, *extra: str) -> float:
    """Seconds from starting ``supervisor run --burst`` to its exit."""
    return common.run_burst(dsn, "-q", queue, "-n", str(children), *extra)


def noop_through_supervisor(dsn: str, jobs: int, prefetch: int, children: int = 2,
                            *extra: str) -> float:
    common.reset(dsn)
    enqueue_many("run_noop", [{}] * jobs, queue="bench", dsn=dsn)
    elapsed = run_supervisor(dsn, "bench", children, "--prefetch", str(prefetch), *extra)
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


def cpu_through_supervisor(dsn: str, tasks: list[int]) -> tuple[float, float]:
    """(wall seconds including start-up, seconds from the first claim to the last
    completion as the database recorded them)."""
    common.reset(dsn)
    enqueue_many("run_cpu", [{"n": n} for n in tasks], queue="bench_cpu", dsn=dsn)
    wall = run_supervisor(dsn, "bench_cpu", 2)
    with psycopg.connect(dsn, autocommit=True) as conn:
        span = conn.execute("SELECT extract(epoch FROM max(finished_at) - min(attempted_at))"
                            " FROM supervisor.jobs").fetchone()[0]
    return wall, float(span)


def cpu_through_multiprocessing(tasks: list[int]) -> float:
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(spin, tasks, chunksize=1)
    return time.perf_counter() - t0


def run(base_dsn: str = common.DEFAULT_DSN, jobs: int = 20_000, runs: int = 3,
        children: tuple[int, ...] = (1, 2, 4), prefetch: tuple[int, ...] = (1, 64),
        cpu_jobs: int = 200, cpu_iterations: int = 400_000) -> list[tuple[str, str]]:
    """Rows for the report: no-op throughput against the store's and the pipes' own
    ceilings, and CPU-bound work against multiprocessing.Pool, all in one run."""
    dsn = common.scratch_database(base_dsn, "supervisor_bench_run")
    rows: list[tuple[str, str]] = []
    med = common.median
    try:
        # Every child count at the largest prefetch; the smaller prefetches at -n 2 only.
        combos = [(n, max(prefetch)) for n in children]
        combos += [(2, pf) for pf in prefetch if pf != max(prefetch)]
        for n, pf in combos:
            rates = [noop_through_supervisor(dsn, jobs, pf, n) for _ in range(runs)]
            rows.append((f"no-op, `supervisor run -n {n} --burst --prefetch {pf}`, "
                         f"{jobs:,} jobs, start-up included", f"{med(rates):,.0f} jobs/s"))
        rates = [store_ceiling(dsn, jobs) for _ in range(runs)]
        rows.append(("database ceiling: the store's claim+complete loop alone, batch 512",
                     f"{med(rates):,.0f} jobs/s"))
        rates = [bench_pool.bench_pool(jobs, 2) for _ in range(runs)]
        rows.append(("pipe ceiling: the pool alone, no-op round trips, 2 children",
                     f"{med(rates):,.0f} /s"))
        rates = [bench_pool.bench_raw(jobs, 2) for _ in range(runs)]
        rows.append(("raw pipe ping-pong, 2 children, 1 in flight", f"{med(rates):,.0f} /s"))
        tasks = [cpu_iterations] * cpu_jobs
        ours = [cpu_through_supervisor(dsn, tasks) for _ in range(runs)]
        wall, span = med([w for w, _ in ours]), med([s for _, s in ours])
        theirs = med([cpu_through_multiprocessing(tasks) for _ in range(runs)])
        per_task = theirs * 2 / len(tasks) * 1000
        rows.append((f"CPU-bound: {cpu_jobs} jobs of ~{per_task:.0f} ms, `supervisor run -n 2`",
                     f"{wall:.2f} s wall (process start to exit), {span:.2f} s from first "
                     "claim to last completion"))
        rows.append(("CPU-bound: the same work, `multiprocessing.Pool(2).map` in a running "
                     "interpreter", f"{theirs:.2f} s"))
        rows.append(("CPU efficiency: multiprocessing / ours", f"{theirs / span:.3f} while "
                     f"working, {theirs / wall:.3f} including our start-up"))
    finally:
        common.drop_database(base_dsn, "supervisor_bench_run")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--children", type=int, nargs="*", default=[2])
    parser.add_argument("--prefetch", type=int, nargs="*", default=[1, 64])
    parser.add_argument("--cpu-jobs", type=int, default=200)
    args = parser.parse_args()
    rows = run(args.dsn, args.jobs, args.runs, tuple(args.children), tuple(args.prefetch),
               args.cpu_jobs)
    print(f"Machine: {common.machine(args.dsn)}; medians of {args.runs} runs\n")
    print("| measurement | result |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()

"""CPU efficiency with default settings: ``supervisor run -n 2 --burst`` against
``multiprocessing.Pool(2)`` (chunksize 1) on the same CPU work, 10 CPU-seconds split into
jobs of 1, 5, 20 and 100 ms, start-up included; and no-op jobs drained with defaults.

Efficiency is the Pool's wall time over ours (1.0: as fast as the Pool). With
``--code DIR [DIR ...]`` each checkout's supervisor runs in turn on the same database
and machine, for before/after figures in one run (the Pool's times are shared).

Usage: python scripts/bench/efficiency.py [--runs 3] [--cpu-seconds 10] [--code DIR ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import bench_run
import common
from bench_handlers import spin

from shared.enqueue import enqueue_many

LENGTHS_MS = (1, 5, 20, 100)


def iterations_per_ms() -> float:
    """Loop iterations of ``spin`` per millisecond of CPU in this process."""
    spin(200_000)
    started = time.process_time()
    spin(2_000_000)
    return 2_000_000 / ((time.process_time() - started) * 1000)


def ours(dsn: str, tasks: list[int]) -> float:
    common.reset(dsn)
    enqueue_many("run_cpu", [{"n": n} for n in tasks], queue="bench_cpu", dsn=dsn)
    return bench_run.run_supervisor(dsn, "bench_cpu", 2)


def noop_default(dsn: str, jobs: int) -> float:
    """Jobs/s of ``supervisor run -n 2 --burst`` draining ``jobs`` no-ops, start-up
    included; exits if any job did not complete (a rate must not come from a run that
    stopped early)."""
    common.reset(dsn)
    enqueue_many("run_noop", [{}] * jobs, queue="bench", dsn=dsn)
    rate = jobs / bench_run.run_supervisor(dsn, "bench", 2)
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state = 'completed'"
                            " AND attempt = 1").fetchone()[0]
    if done != jobs:
        raise SystemExit(f"only {done} of {jobs} no-op jobs completed on their first attempt")
    return rate


def run(base_dsn: str, runs: int = 3, cpu_seconds: float = 10.0, noop_jobs: int = 20_000,
        codes: tuple[str, ...] = (str(common.ROOT),)) -> list[tuple[str, str]]:
    """Rows for the report: per job length, the Pool's time and each checkout's time and
    efficiency; then the no-op rate with defaults."""
    per_ms = iterations_per_ms()
    # Each checkout runs on a database its own code migrated: one refuses a schema newer
    # than its own (common.scratch_database_for).
    names = {code: f"supervisor_bench_efficiency_{i}" for i, code in enumerate(codes)}
    dsns = {code: common.scratch_database_for(base_dsn, name, code)
            for code, name in names.items()}
    rows = []
    try:
        for length in LENGTHS_MS:
            tasks = [round(per_ms * length)] * round(cpu_seconds * 1000 / length)
            pool = common.median([bench_run.cpu_through_multiprocessing(tasks)
                                  for _ in range(runs)])
            for code in codes:
                os.environ["BENCH_CODE"] = code
                wall = common.median([ours(dsns[code], tasks) for _ in range(runs)])
                rows.append((f"{length} ms jobs x {len(tasks)}, `-n 2` defaults "
                             f"({os.path.basename(code.rstrip('/'))}): efficiency against "
                             "`multiprocessing.Pool(2)`",
                             f"{pool / wall:.2f} ({wall:.2f} s against {pool:.2f} s)"))
        for code in codes:
            os.environ["BENCH_CODE"] = code
            rate = common.median([noop_default(dsns[code], noop_jobs) for _ in range(runs)])
            rows.append((f"no-op x {noop_jobs:,}, `-n 2` defaults, start-up included "
                         f"({os.path.basename(code.rstrip('/'))})", f"{rate:,.0f} jobs/s"))
    finally:
        os.environ.pop("BENCH_CODE", None)
        for name in names.values():
            common.drop_database(base_dsn, name)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cpu-seconds", type=float, default=10.0)
    parser.add_argument("--noop-jobs", type=int, default=20_000)
    parser.add_argument("--code", nargs="*", default=[str(common.ROOT)])
    args = parser.parse_args()
    for label, value in run(args.dsn, args.runs, args.cpu_seconds, args.noop_jobs,
                            tuple(args.code)):
        print(f"{label}: {value}", flush=True)


if __name__ == "__main__":
    main()

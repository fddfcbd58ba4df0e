"""Where a CPU-bound batch run's time goes: per job and around the jobs, ours against
``multiprocessing.Pool(2)`` on the same work.

Each job spins for about ``--ms`` of CPU and records its own thread CPU time, wall time,
pid, start and end (``bench_handlers.timed_spin``; the Pool runs the same function).
From those records, per run: process start to the first job's first line (ours), the
span from the first job start to the last job end, the last job end to exit (ours), the
gaps between two jobs in one child, CPU and wall time per job in the child, and over the
run the supervisor process's own CPU, every PostgreSQL process's CPU and the database's
committed transactions.

Usage: python scripts/bench/job_timeline.py [--ms 20] [--jobs 500] [--rounds 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from bench_handlers import spin, timed_spin

from shared.enqueue import enqueue_many

DATABASE = "supervisor_bench_timeline"
TICK = os.sysconf("SC_CLK_TCK")


def iterations_per_ms() -> float:
    spin(200_000)
    started = time.process_time()
    spin(2_000_000)
    return 2_000_000 / ((time.process_time() - started) * 1000)


def _stat_cpu(fields: list[str], children: bool) -> float:
    ticks = int(fields[11]) + int(fields[12])
    if children:  # reaped children: a backend that exited is counted by the postmaster
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICK


def postgres_cpu() -> float:
    """CPU seconds of every process named postgres, and of the children they reaped."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")].startswith("postgres"):
            total += _stat_cpu(stat[stat.rindex(")") + 2:].split(), True)
    return total


def commits(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT xact_commit FROM pg_stat_database "
                            "WHERE datname = current_database()").fetchone()[0]


def through_pool(n: int, jobs: int) -> tuple[list, dict]:
    with multiprocessing.get_context("fork").Pool(2) as pool:
        return pool.map(timed_spin, [n] * jobs, chunksize=1), {}


def through_supervisor(dsn: str, n: int, jobs: int) -> tuple[list, dict]:
    common.reset(dsn)
    enqueue_many("run_cpu_timed", [{"n": n}] * jobs, queue="bench_timed", dsn=dsn)
    env = common.supervisor_env(dsn)
    before_commits, before_pg = commits(dsn), postgres_cpu()
    began = time.time()
    proc = subprocess.Popen(common.supervisor_cmd("--burst", "-q", "bench_timed", "-n", "2"),
                            env=env, cwd=str(common.SCRIPTS))
    parent_cpu = [0.0]

    def watch() -> None:  # the parent's own CPU, read until it exits
        while proc.poll() is None:
            try:
                stat = Path(f"/proc/{proc.pid}/stat").read_text()
                parent_cpu[0] = _stat_cpu(stat[stat.rindex(")") + 2:].split(), False)
            except OSError:
                pass
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    if proc.wait() != 0:
        raise SystemExit("supervisor run failed")
    ended = time.time()
    watcher.join()
    extra = {"parent_cpu": parent_cpu[0], "pg_cpu": postgres_cpu() - before_pg,
             "commits": commits(dsn) - before_commits, "began": began, "ended": ended}
    with psycopg.connect(dsn, autocommit=True) as conn:
        records = [orjson.loads(r[0]) for r in
                   conn.execute("SELECT result::text FROM supervisor.jobs")]
    return records, extra


def describe(name: str, records: list, extra: dict) -> str:
    per_child = defaultdict(list)
    for _, _, pid, start, end in records:
        per_child[pid].append((start, end))
    gaps = sorted(b[0] - a[1] for runs in per_child.values()
                  for a, b in pairwise(sorted(runs)))
    first = min(r[3] for r in records)
    last = max(r[4] for r in records)
    line = (f"{name}: span {last - first:.3f} s; gap median {statistics.median(gaps) * 1000:.2f}"
            f" ms, p90 {gaps[int(len(gaps) * 0.9)] * 1000:.2f} ms; per job cpu "
            f"{statistics.median(r[0] for r in records) * 1000:.2f} ms, wall "
            f"{statistics.median(r[1] for r in records) * 1000:.2f} ms")
    if extra:
        line += (f"; start {first - extra['began']:.3f} s, exit {extra['ended'] - last:.3f} s"
                 f"; parent CPU {extra['parent_cpu']:.2f} s, PostgreSQL CPU "
                 f"{extra['pg_cpu']:.2f} s, {extra['commits']} commits")
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--ms", type=float, default=20.0)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    n = round(iterations_per_ms() * args.ms)
    dsn = common.scratch_database(args.dsn, DATABASE)
    try:
        for _ in range(args.rounds):
            print(describe("Pool(2)", *through_pool(n, args.jobs)), flush=True)
            print(describe("supervisor", *through_supervisor(dsn, n, args.jobs)), flush=True)
    finally:
        common.drop_database(args.dsn, DATABASE)


if __name__ == "__main__":
    main()

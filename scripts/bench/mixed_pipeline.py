"""A mixed pipeline under a memory budget (issue 27): 90% jobs of 20 ms CPU holding
10 MB, 10% jobs of 2 s CPU holding 500 MB, with reservations, drained by one
``supervisor run -n 4 --memory-budget 1GiB`` (admission) against a hand-tuned split
into two supervisors (``-n 2`` for the heavy queue, whose two 500 MB jobs fit 1 GiB,
and ``-n 2`` for the light one). Reports each run's wall time, the ratio (split time over
admission time: 1.0 is as fast as the split), and whether any job was killed for memory
or crashed. Runs alternate.

Usage: python scripts/bench/mixed_pipeline.py [--jobs 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common
import psycopg
from efficiency import iterations_per_ms

from shared.enqueue import enqueue

DATABASE = "supervisor_bench_mixed"


def enqueue_pipeline(dsn: str, jobs: int, per_ms: float) -> None:
    common.reset(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(jobs):
            if i % 10 == 9:
                enqueue("mixed_job", {"iterations": int(2000 * per_ms), "megabytes": 500},
                        queue="heavy", memory="500MiB", conn=conn)
            else:
                enqueue("mixed_job", {"iterations": int(20 * per_ms), "megabytes": 10},
                        queue="light", memory="10MiB", conn=conn)


def outcome(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        states = dict(conn.execute("SELECT state, count(*) FROM supervisor.jobs "
                                   "GROUP BY state").fetchall())
        killed = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE errors::text ~ "
                              "'\"kind\": \"(memory|crashed)\"'").fetchone()[0]
    return states | {"killed": killed}


def admitted(dsn: str) -> float:
    return common.run_burst(dsn, "-n", "4", "--memory-budget", "1GiB", "-q", "heavy",
                            "-q", "light")


def split(dsn: str) -> float:
    env = common.supervisor_env(dsn)
    cwd = env["PYTHONPATH"].split(os.pathsep)[0]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(common.supervisor_cmd("--burst", "-n", "2", "-q", queue),
                              env=env, cwd=cwd, stderr=subprocess.DEVNULL)
             for queue in ("heavy", "light")]
    for proc in procs:
        if proc.wait(timeout=900) != 0:
            raise SystemExit("a split supervisor failed")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    dsn = common.scratch_database(args.dsn, DATABASE)
    per_ms = iterations_per_ms()
    times: dict[str, list[float]] = {"admission": [], "split": []}
    for _ in range(args.rounds):
        for name, run in (("admission", admitted), ("split", split)):
            enqueue_pipeline(dsn, args.jobs, per_ms)
            took = run(dsn)
            result = outcome(dsn)
            times[name].append(took)
            print(f"{name}: {took:.2f} s, {result}", flush=True)
    a, s = common.median(times["admission"]), common.median(times["split"])
    print(f"median admission {a:.2f} s, split {s:.2f} s, split/admission {s / a:.2f}")
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()

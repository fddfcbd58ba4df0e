"""Several supervisors on one database: 1, 2 and 4 ``supervisor run -n 2 --burst``
processes draining the same 20k no-op jobs together (start-up included).

Usage: python scripts/bench/multi.py [--jobs 20000] [--runs 3]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue_many


def drain(dsn: str, jobs: int, supervisors: int) -> float:
    """Jobs/s for ``supervisors`` processes draining ``jobs`` together."""
    common.reset(dsn)
    enqueue_many("run_noop", [{}] * jobs, queue="bench", dsn=dsn)
    cmd = common.supervisor_cmd("-n", "2", "-q", "bench", "--burst", "--prefetch", "64")
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd, env=common.supervisor_env(dsn), cwd=str(common.SCRIPTS),
                              stderr=subprocess.PIPE, text=True) for _ in range(supervisors)]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"supervisor exited {proc.returncode}: {err[-1000:]}")
    elapsed = time.perf_counter() - t0
    done = common.count_state(dsn, "completed")
    if done != jobs:
        raise SystemExit(f"{done} of {jobs} completed")
    return jobs / elapsed


def run(base_dsn: str = common.DEFAULT_DSN, jobs: int = 20_000,
        runs: int = 3) -> list[tuple[str, str]]:
    """Rows for the report."""
    dsn = common.scratch_database(base_dsn, "supervisor_bench_multi")
    rows = []
    try:
        for n in (1, 2, 4):
            rate = common.median([drain(dsn, jobs, n) for _ in range(runs)])
            rows.append((f"{n} supervisor{'s' if n > 1 else ''} x `-n 2` on one database, "
                         f"{jobs:,} no-op jobs", f"{rate:,.0f} jobs/s"))
    finally:
        common.drop_database(base_dsn, "supervisor_bench_multi")
    return rows


if __name__ == "__main__":
    common.cli(run, __doc__.splitlines()[0], jobs=20_000, runs=3)

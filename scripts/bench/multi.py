"""Several supervisors on one database: 1, 2, 4 and 8 ``supervisor run -n C --burst``
processes draining the same no-op jobs together (start-up included).

The capacity model in docs/deployment.md is checked against this: past the database's
claim+complete ceiling, more supervisors add connections and lock traffic, not jobs/s.

Usage: python scripts/bench/multi.py [--jobs 20000] [--runs 3] [--counts 1,2,4,8]
       [--children 2] [--listen yes|no]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue_many


def drain(dsn: str, jobs: int, supervisors: int, children: int = 2,
          listen: bool = True) -> float:
    """Jobs/s for ``supervisors`` processes of ``children`` each draining ``jobs``."""
    common.reset(dsn)
    enqueue_many("run_noop", [{}] * jobs, queue="bench", dsn=dsn)
    flags = [] if listen else ["--no-listen"]
    cmd = common.supervisor_cmd("-n", str(children), "-q", "bench", "--burst",
                                "--prefetch", "64", *flags)
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


def run(base_dsn: str = common.DEFAULT_DSN, jobs: int = 20_000, runs: int = 3,
        counts: str = "1,2,4,8", children: int = 2,
        listen: str = "yes") -> list[tuple[str, str]]:
    """Rows for the report."""
    dsn = common.scratch_database(base_dsn, "supervisor_bench_multi")
    rows = []
    poll_only = listen == "no"
    try:
        for n in (int(c) for c in counts.split(",")):
            rate = common.median([drain(dsn, jobs, n, children, not poll_only)
                                  for _ in range(runs)])
            rows.append((f"{n} supervisor{'s' if n > 1 else ''} x `-n {children}` on one "
                         f"database{' (--no-listen)' if poll_only else ''}, {jobs:,} no-op "
                         "jobs", f"{rate:,.0f} jobs/s"))
    finally:
        common.drop_database(base_dsn, "supervisor_bench_multi")
    return rows


if __name__ == "__main__":
    common.cli(run, __doc__.splitlines()[0], jobs=20_000, runs=3, counts="1,2,4,8",
               children=2, listen="yes")

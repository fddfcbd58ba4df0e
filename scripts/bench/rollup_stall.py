"""How long the maintenance leader's loop waited for the roll-up and the depth sample
while it ran them itself (before ``supervisor.db.HistoryWriter``), and how much of the
database's CPU they took: a copy of ``--commit`` (default c097c9f, the last whose leader
rolled up in its loop) whose round times each call, wall-clock in the loop and CPU of
the work connection's backend (``/proc/<pid>/stat``, so the database must run on this
machine), drains ``--jobs`` no-op jobs with ``supervisor run -n 2 --burst``.

Every child that finishes while the loop waits sits idle until it is over, so the wall
time is what the drain loses outright; the CPU is what the database spends beside it.

Usage: python scripts/bench/rollup_stall.py [--jobs 1200000] [--commit c097c9f]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common
import rollup_cost

from shared.enqueue import enqueue_many

DATABASE = "supervisor_bench_rollup_stall"
CALLS = ("        store.roll_up()  # the per-minute history of finished jobs (dashboard charts)\n"
         "        store.sample_depth()  # and each queue's depth, once a minute")
TIMED = '''        def backend_cpu():
            pid = store.connection.pgconn.backend_pid
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        cpu0, wall0 = backend_cpu(), time.perf_counter()
        rows = store.roll_up()
        cpu1, wall1 = backend_cpu(), time.perf_counter()
        sampled = store.sample_depth()
        cpu2, wall2 = backend_cpu(), time.perf_counter()
        log.warning("TIMED roll_up %.6f %.6f %d sample %.6f %.6f %d", wall1 - wall0,
                    cpu1 - cpu0, rows, wall2 - wall1, cpu2 - cpu1, sampled)'''
LINE = re.compile(r"TIMED roll_up (\S+) (\S+) (\d+) sample (\S+) (\S+) (\d+)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=1_200_000)
    parser.add_argument("--commit", default="c097c9f")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollup-stall-") as tmp:
        code = rollup_cost.checkout(args.commit, Path(tmp))
        path = code / "supervisor" / "engine" / "maintenance.py"
        text = path.read_text()
        if CALLS not in text:
            raise SystemExit(f"rollup_stall: {args.commit} does not roll up in its loop")
        path.write_text(text.replace(CALLS, TIMED))
        os.environ["BENCH_CODE"] = str(code)
        dsn = common.scratch_database_for(args.dsn, DATABASE, str(code))
        try:
            enqueue_many("run_noop", [{}] * args.jobs, queue="bench", dsn=dsn)
            env = common.supervisor_env(dsn)
            print(f"load before: {rollup_cost.load()}", flush=True)
            began = time.perf_counter()
            proc = subprocess.run(common.supervisor_cmd("--burst", "-q", "bench", "-n", "2"),
                                  env=env, cwd=str(code), capture_output=True, text=True)
            wall = time.perf_counter() - began
            print(f"load after: {rollup_cost.load()}", flush=True)
        finally:
            common.drop_database(args.dsn, DATABASE)
    if proc.returncode != 0:
        raise SystemExit(f"supervisor run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    calls = [match.groups() for match in map(LINE.search, proc.stderr.splitlines()) if match]
    roll_wall = sum(float(c[0]) for c in calls)
    roll_cpu = sum(float(c[1]) for c in calls)
    sample_wall = sum(float(c[3]) for c in calls)
    sample_cpu = sum(float(c[4]) for c in calls)
    cancelled = sum(1 for c in calls if float(c[3]) >= 0.24 and c[5] == "0")
    print(f"{args.jobs:,} no-op jobs in {wall:.1f} s ({args.jobs / wall:,.0f} jobs/s), "
          f"{len(calls)} leader rounds")
    print(f"  roll-up: {roll_wall:.2f} s in the loop ({roll_wall / wall:.1%} of the drain), "
          f"{roll_cpu:.2f} s of database CPU; slowest {max(float(c[0]) for c in calls):.3f} s")
    print(f"  depth sample: {sample_wall:.2f} s in the loop ({sample_wall / wall:.1%}), "
          f"{sample_cpu:.2f} s of database CPU; {cancelled} counts cancelled at the timeout")


if __name__ == "__main__":
    main()

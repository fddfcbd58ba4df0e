"""The parent's cost per job: CPU seconds of the supervisor process itself (children
excluded) per no-op job, and where it goes (cProfile, top functions by own time).

A ``supervisor run --burst`` drains ``jobs`` no-op jobs under cProfile in a subprocess;
the profiler is switched off in each forked child, so the children run at full speed
and only the parent is measured. The CPU figure comes from ``getrusage(RUSAGE_SELF)``
without the profiler (a second run), as the profiler itself inflates it.

``--ms M`` makes each job spin for about M ms of CPU instead (``run_cpu``, on its own
queue, at the queue's default prefetch): the parent's cost per job where the children,
not the parent, set the pace.

``--cpu-clock`` has the profiler count CPU time instead of wall time.

Usage: python scripts/bench/profile_parent.py [--dsn DSN] [--jobs 20000] [--children 2]
       [--top 15] [--ms 0] [--cpu-clock]
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
import efficiency

from shared.enqueue import enqueue_many

DATABASE = "supervisor_bench_profile"

# Runs inside the measured process: the CLI in-process, profiled or not, then the
# parent's own CPU time (RUSAGE_SELF: reaped children are in RUSAGE_CHILDREN).
_INNER = r"""
import cProfile, json, os, resource, sys
out, profile, cpu_clock = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
sys.argv = ["supervisor", *sys.argv[4:]]
import time
prof = None
if profile:
    prof = cProfile.Profile(time.process_time) if cpu_clock else cProfile.Profile()
if prof:
    os.register_at_fork(after_in_child=prof.disable)
    prof.enable()
from supervisor.cli.main import main
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
if prof:
    prof.disable()
    prof.dump_stats(out + ".prof")
usage = resource.getrusage(resource.RUSAGE_SELF)
with open(out, "w") as f:
    json.dump({"code": code, "cpu": usage.ru_utime + usage.ru_stime}, f)
"""


def measure(dsn: str, jobs: int, children: int, profile: bool, out: str,
            spins: int = 0, cpu_clock: bool = False) -> dict:
    """One drain of ``jobs`` no-ops (or CPU jobs of ``spins`` loop iterations each); the
    parent's CPU seconds and the wall time."""
    common.reset(dsn)
    if spins:
        enqueue_many("run_cpu", [{"n": spins}] * jobs, queue="bench_cpu", dsn=dsn)
        queue_args = ["-q", "bench_cpu"]
    else:
        enqueue_many("run_noop", [{}] * jobs, queue="bench", dsn=dsn)
        queue_args = ["-q", "bench", "--prefetch", "64"]
    args = ["run", "--app", "bench_handlers", "--log-level", "warning", "--burst",
            "-n", str(children), *queue_args]
    env = common.supervisor_env(dsn)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _INNER, out, "1" if profile else "0",
                           "1" if cpu_clock else "0", *args],
                          env=env, cwd=str(common.SCRIPTS), capture_output=True, text=True,
                          timeout=900)
    wall = time.perf_counter() - t0
    result = json.loads(Path(out).read_text()) if Path(out).exists() else {"code": None}
    if proc.returncode != 0 or result["code"] != 0:
        raise SystemExit(f"supervisor run failed:\n{proc.stderr[-2000:]}")
    if common.count_state(dsn, "completed") != jobs:
        raise SystemExit("not every job completed")
    return {"cpu": result["cpu"], "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--children", type=int, default=2)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--ms", type=float, default=0.0,
                        help="CPU per job in ms (0: no-op jobs)")
    parser.add_argument("--cpu-clock", action="store_true",
                        help="profile CPU time, not wall time: a loop that waits on a "
                             "busy machine is not charged for the wait")
    args = parser.parse_args()
    spins = round(efficiency.iterations_per_ms() * args.ms) if args.ms else 0
    dsn = common.scratch_database(args.dsn, DATABASE)
    out = os.path.join(tempfile.mkdtemp(prefix="profile-parent-"), "result.json")
    try:
        plain = measure(dsn, args.jobs, args.children, False, out, spins)
        measure(dsn, args.jobs, args.children, True, out, spins, args.cpu_clock)
    finally:
        common.drop_database(args.dsn, DATABASE)
    per_job = plain["cpu"] / args.jobs * 1e6
    what = f"{args.ms:g} ms" if args.ms else "no-op"
    print(f"| parent CPU per {what} job (-n {args.children}, {args.jobs:,} jobs, start-up "
          f"included) | {per_job:,.0f} µs |")
    print(f"| drain rate, same run | {args.jobs / plain['wall']:,.0f} jobs/s |")
    print(f"| parent's share of one core while draining | "
          f"{plain['cpu'] / plain['wall']:.0%} |")
    print()
    stats = pstats.Stats(out + ".prof")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()

"""Issue 14, global limits: what the feature costs, and how exactly a global rate holds.

* an unlimited queue's no-op throughput, this checkout against ``--base`` (the code
  before the feature), runs alternating on the same machine (within 5% is the bar);
* a queue limited to ``max_running`` = its children (the limit never binds) against the
  same queue unlimited, this checkout (within 15%);
* a global ``max_rate`` with 1, 2 and 4 supervisors: achieved starts per second (from
  the jobs' ``attempted_at``, set when each started) against the setting (within 5%).

Each checkout runs on a database it migrated itself (the base refuses a newer schema).

Usage: python scripts/bench/global_limits.py --base /work/wt/limits-base
       [--runs 5] [--jobs 20000] [--rate 100] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue_many


def database_for(base_dsn: str, name: str, code: str) -> str:
    """A fresh database migrated by the checkout ``code``."""
    common.drop_database(base_dsn, name)
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(base_dsn, dbname=name)
    env = _env(dsn, code)
    subprocess.run([sys.executable, "-m", "supervisor", "migrate"], env=env, check=True,
                   cwd=env["PYTHONPATH"].split(os.pathsep)[0], capture_output=True)
    return dsn


def _env(dsn: str, code: str) -> dict[str, str]:
    os.environ["BENCH_CODE"] = code
    return common.supervisor_env(dsn)


def reset(dsn: str, limits: dict | None = None, queue: str = "bench") -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE supervisor.jobs, supervisor.supervisors, supervisor.queues")
        has_limits = conn.execute("SELECT to_regclass('supervisor.queue_limits') IS NOT NULL"
                                  ).fetchone()[0]
        if has_limits:
            conn.execute("TRUNCATE supervisor.queue_limits, supervisor.limit_leases")
        if limits:
            conn.execute("INSERT INTO supervisor.queue_limits (queue, max_running, max_rate) "
                         "VALUES (%(queue)s, %(max_running)s, %(max_rate)s)",
                         {"max_running": None, "max_rate": None, "queue": queue} | limits)
        conn.execute("VACUUM ANALYZE supervisor.jobs")


def noop_rate(dsn: str, code: str, jobs: int,
              limits: dict | None = None) -> tuple[float, float]:
    """(no-op jobs per second, CPU microseconds per job of the supervisor and its
    children) through ``supervisor run -n 2 --burst``, start-up included. CPU time moves
    less than wall time when other work shares the machine."""
    reset(dsn, limits)
    enqueue_many("run_noop", [{}] * jobs, queue="bench", dsn=dsn)
    _env(dsn, code)
    before = _children_cpu()
    elapsed = common.run_burst(dsn, "-q", "bench", "-n", "2")
    cpu = _children_cpu() - before
    done = common.count_state(dsn, "completed")
    if done != jobs:
        raise SystemExit(f"only {done} of {jobs} jobs completed")
    return jobs / elapsed, cpu / jobs * 1e6


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # reaped descendants, all of them
    return usage.ru_utime + usage.ru_stime


def achieved_rate(dsn: str, code: str, supervisors: int, rate: float, seconds: float,
                  log: Path) -> tuple[float, float, int]:
    """Starts per second of ``supervisors`` draining one queue limited to ``rate``, from
    the start times the handlers wrote (``run_probe``): over the whole run, after its
    first second (the supervisors start one after the other, and a share moves over
    within two renewals), and the most starts in any one-second window."""
    jobs = round(rate * seconds)
    reset(dsn, {"max_rate": rate}, queue="probe")
    log.unlink(missing_ok=True)
    enqueue_many("run_probe", [{}] * jobs, queue="probe", dsn=dsn)
    env = _env(dsn, code) | {"BENCH_PROBE_LOG": str(log)}
    procs = [subprocess.Popen(common.supervisor_cmd("--burst", "-q", "probe", "-n", "2"),
                              env=env, cwd=env["PYTHONPATH"].split(os.pathsep)[0],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(supervisors)]
    for proc in procs:
        _, err = proc.communicate(timeout=seconds * 4 + 60)
        if proc.returncode != 0:
            raise SystemExit(f"supervisor failed ({proc.returncode}):\n{err[-2000:]}")
    starts = sorted(float(line.split()[1]) for line in log.read_text().splitlines())
    if len(starts) != jobs:
        raise SystemExit(f"only {len(starts)} of {jobs} jobs ran")
    first = starts[0]
    settled = [t for t in starts if t >= first + 1.0]
    busiest, j = 0, 0
    for i, t in enumerate(starts):
        while starts[j] < t - 1.0:
            j += 1
        busiest = max(busiest, i - j + 1)
    return ((len(starts) - 1) / (starts[-1] - first),
            (len(settled) - 1) / (settled[-1] - settled[0]), busiest)


def run(base_dsn: str, base: str, runs: int, jobs: int, rate: float,
        seconds: float) -> list[tuple[str, str]]:
    here = str(common.ROOT)
    rows = []
    new_dsn = database_for(base_dsn, "supervisor_bench_limits", here)
    old_dsn = database_for(base_dsn, "supervisor_bench_limits_base", base)
    try:
        if runs:  # --runs 0: the rate figures only
            before, after, capped = [], [], []
            for _ in range(runs):  # alternating, so drifting load hits both alike
                before.append(noop_rate(old_dsn, base, jobs))
                after.append(noop_rate(new_dsn, here, jobs))
                capped.append(noop_rate(new_dsn, here, jobs, {"max_running": 2}))
            (b, bc), (a, ac), (c, cc) = (
                (common.median([r for r, _ in v]), common.median([u for _, u in v]))
                for v in (before, after, capped))
            rows.append((f"no-op x {jobs:,}, `-n 2`, unlimited queue, before the feature "
                         f"(medians of {runs})", f"{b:,.0f} jobs/s, {bc:.0f} us CPU/job"))
            rows.append(("same, with the feature",
                         f"{a:,.0f} jobs/s ({(a / b - 1) * 100:+.1f}%), {ac:.0f} us CPU/job "
                         f"({(ac / bc - 1) * 100:+.1f}%)"))
            rows.append(("same, with the feature, queue limited to `--max-running 2` (not "
                         "binding)", f"{c:,.0f} jobs/s ({(c / a - 1) * 100:+.1f}% against "
                         f"unlimited), {cc:.0f} us CPU/job ({(cc / ac - 1) * 100:+.1f}%)"))
            rows.append(("runs (jobs/s): before / with / limited",
                         " / ".join(", ".join(f"{r:,.0f}" for r, _ in v)
                                    for v in (before, after, capped))))
            rows.append(("runs (us CPU/job): before / with / limited",
                         " / ".join(", ".join(f"{u:.0f}" for _, u in v)
                                    for v in (before, after, capped))))
        for count in (1, 2, 4):
            got, settled, busiest = achieved_rate(
                new_dsn, here, count, rate, seconds,
                Path(f"/tmp/bench_limits_probe_{os.getpid()}.log"))
            rows.append((f"`--max-rate {rate:g}`, {count} supervisor{'s' * (count > 1)} "
                         f"x `-n 2`, {round(rate * seconds)} no-op jobs",
                         f"{got:.2f} starts/s ({(got / rate - 1) * 100:+.1f}%); after the "
                         f"first second {settled:.2f} ({(settled / rate - 1) * 100:+.1f}%); "
                         f"busiest second {busiest}"))
    finally:
        os.environ.pop("BENCH_CODE", None)
        common.drop_database(base_dsn, "supervisor_bench_limits")
        common.drop_database(base_dsn, "supervisor_bench_limits_base")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--base", required=True, help="checkout of the code before")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print(f"machine: {common.machine(args.dsn)}", flush=True)
    started = time.time()
    for label, value in run(args.dsn, args.base, args.runs, args.jobs, args.rate,
                            args.seconds):
        print(f"| {label} | {value} |", flush=True)
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"took {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()

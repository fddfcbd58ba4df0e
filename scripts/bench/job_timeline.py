"""Where a CPU-bound batch run's time goes: per job and around the jobs, ours against
``multiprocessing.Pool(2)`` on the same work.

Each job spins for about ``--ms`` of CPU and records its own thread CPU time, wall time,
pid, start and end (``bench_handlers.timed_spin``; the Pool runs the same function).
From those records, per run: process start to the first job's first line (ours), the
span from the first job start to the last job end, the tail (how long the child that
finished first stood idle before the last job ended), the last job end to exit (ours),
the gaps between two jobs in one child, CPU and wall time per job in the child, and over the
run the supervisor process's own CPU (in all, and from the first job's start on, which
leaves out its start-up), every PostgreSQL process's CPU, the database's committed
transactions and the rows of supervisor.jobs it updated, each also per job.

The loop's rhythm, per job and from the first job's start on (all from ``/proc`` of the
supervisor process, so the code measured needs nothing added): its voluntary context
switches (each a wait the loop, or a statement it waited on, gave the CPU up in: the
loop's wake-ups and blocking round trips), and its read and write system calls
(``syscr``/``syscw``: the frames on the children's pipes and the wake-up fds; libpq's
socket ``send``/``recv`` are not among them). Statements are the transactions the
database committed (every statement of the supervisor is its own, in autocommit).
``--wakeups``: also scrape ``supervisor_loop_wakeups_total`` by reason from the metrics
port every 0.5 s (the scrapes cost the parent a little CPU, and wake it: they are
counted under ``scrape``).

``--code DIR [DIR ...]``: each checkout's supervisor in turn within every round, on a
database its own code migrated (``common.scratch_database_for``), for a before/after
comparison in one run.

Usage: python scripts/bench/job_timeline.py [--ms 20] [--jobs 500] [--rounds 2]
       [--code DIR ...] [--no-pool] [--wakeups]
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


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of one live process so far, not counting its
    children; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return _stat_cpu(stat[stat.rindex(")") + 2:].split(), False)


def loop_counters(pid: int) -> dict[str, int] | None:
    """The supervisor process's voluntary context switches and read/write system calls
    so far; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        io = Path(f"/proc/{pid}/io").read_text()
    except OSError:
        return None
    counters = {}
    for line in (*status.splitlines(), *io.splitlines()):
        key, _, value = line.partition(":")
        if key in ("voluntary_ctxt_switches", "syscr", "syscw"):
            counters[key] = int(value)
    return counters


def scrape_wakeups(port: int) -> dict[str, float] | None:
    """``supervisor_loop_wakeups_total`` by reason, from the metrics port (None: no
    answer yet)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            body = r.read().decode()
    except OSError:
        return None
    found = {}
    for line in body.splitlines():
        if line.startswith("supervisor_loop_wakeups_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            found[reason] = float(line.rsplit(" ", 1)[1])
    return found


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def rows_updated(dsn: str) -> int:
    """Rows of supervisor.jobs updated so far, once the exited backends' counts are in
    (they report them as they exit; read until two reads agree)."""
    last = -1
    for _ in range(20):
        with psycopg.connect(dsn, autocommit=True) as conn:
            now = conn.execute("SELECT n_tup_upd FROM pg_stat_user_tables WHERE schemaname "
                               "= 'supervisor' AND relname = 'jobs'").fetchone()[0]
        if now == last:
            return now
        last = now
        time.sleep(0.3)
    return last


def through_pool(n: int, jobs: int) -> tuple[list, dict]:
    with multiprocessing.get_context("fork").Pool(2) as pool:
        return pool.map(timed_spin, [n] * jobs, chunksize=1), {}


def through_supervisor(dsn: str, n: int, jobs: int, wakeups: bool = False
                       ) -> tuple[list, dict]:
    common.reset(dsn)
    enqueue_many("run_cpu_timed", [{"n": n}] * jobs, queue="bench_timed", dsn=dsn)
    env = common.supervisor_env(dsn)
    before_commits, before_pg, before_rows = commits(dsn), postgres_cpu(), rows_updated(dsn)
    began = time.time()
    port = free_port() if wakeups else None
    extra_args = ("--metrics-port", str(port)) if port is not None else ()
    proc = subprocess.Popen(common.supervisor_cmd("--burst", "-q", "bench_timed", "-n", "2",
                                                  *extra_args),
                            env=env, cwd=str(common.SCRIPTS))
    parent_cpu = [0.0]
    samples: list[tuple[float, float]] = []  # (time, the parent's CPU so far)
    counted: list[tuple[float, dict[str, int]]] = []  # (time, ``loop_counters``)
    woke: list[tuple[float, dict[str, float]]] = []  # (time, wake-ups by reason)

    backends: dict[int, float] = {}  # the run's own PostgreSQL backends: CPU last seen
    pids: set[int] = set()
    asked = [0]

    def watch() -> None:  # the parent's own CPU, read until it exits
        with psycopg.connect(dsn, autocommit=True) as conn:
            while proc.poll() is None:
                cpu = process_cpu(proc.pid)
                if cpu is not None:
                    parent_cpu[0] = cpu
                    samples.append((time.time(), cpu))
                counters = loop_counters(proc.pid)
                if counters is not None:
                    counted.append((time.time(), counters))
                if port is not None and len(samples) % 25 == 1:
                    scraped = scrape_wakeups(port)
                    if scraped is not None:
                        woke.append((time.time(), scraped))
                # Other work on this shared server is not the run's: only the backends
                # connected to its database count (their CPU read every 20 ms, so the
                # last few ms of each are missed; the list asked for every 0.2 s, each
                # ask one commit, taken off the run's count).
                if len(samples) % 10 == 1:
                    asked[0] += 1
                    pids.update(pid for (pid,) in conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                        " AND pid <> pg_backend_pid()").fetchall())
                for pid in pids:
                    cpu = process_cpu(pid)
                    if cpu is not None:
                        backends[pid] = cpu
                time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    if proc.wait() != 0:
        raise SystemExit("supervisor run failed")
    ended = time.time()
    watcher.join()
    extra = {"parent_cpu": parent_cpu[0], "pg_cpu": postgres_cpu() - before_pg,
             "commits": commits(dsn) - before_commits - asked[0] - 1, "began": began,
             "ended": ended,
             "rows": rows_updated(dsn) - before_rows, "backends_cpu": sum(backends.values())}
    with psycopg.connect(dsn, autocommit=True) as conn:
        records = [orjson.loads(r[0]) for r in
                   conn.execute("SELECT result::text FROM supervisor.jobs")]
    first = min(r[3] for r in records)
    at_first = [cpu for t, cpu in samples if t <= first]
    extra["startup_cpu"] = at_first[-1] if at_first else 0.0
    extra["loop"] = since_first(counted, first)
    extra["wakeups"] = since_first(woke, first)
    return records, extra


def since_first(series: list, first: float) -> dict:
    """A counter series' growth from the first job's start to its last reading."""
    if not series:
        return {}
    before = [c for t, c in series if t <= first]
    base = before[-1] if before else {}
    last = series[-1][1]
    return {key: value - base.get(key, 0) for key, value in last.items()}


def describe(name: str, records: list, extra: dict) -> str:
    per_child = defaultdict(list)
    for _, _, pid, start, end in records:
        per_child[pid].append((start, end))
    gaps = sorted(b[0] - a[1] for runs in per_child.values()
                  for a, b in pairwise(sorted(runs)))
    first = min(r[3] for r in records)
    last = max(r[4] for r in records)
    # The tail: how long the child that finished first stood idle before the last job
    # ended (a direct loss: the Pool's children share one queue to the end).
    tail = last - min(max(end for _, end in runs) for runs in per_child.values())
    line = (f"{name}: span {last - first:.3f} s; tail {tail * 1000:.0f} ms; gap median "
            f"{statistics.median(gaps) * 1000:.2f} ms, p90 "
            f"{gaps[int(len(gaps) * 0.9)] * 1000:.2f} ms; per job cpu "
            f"{statistics.median(r[0] for r in records) * 1000:.2f} ms, wall "
            f"{statistics.median(r[1] for r in records) * 1000:.2f} ms")
    if extra:
        jobs = len(records)
        after_start = extra["parent_cpu"] - extra["startup_cpu"]
        line += (f"; start {first - extra['began']:.3f} s, exit {extra['ended'] - last:.3f} s"
                 f"; parent CPU {extra['parent_cpu']:.2f} s ({after_start:.2f} s from the "
                 f"first job on: {after_start / jobs * 1000:.2f} ms/job), PostgreSQL CPU "
                 f"{extra['pg_cpu']:.2f} s (every postgres process on the machine), the run's "
                 f"own backends {extra['backends_cpu']:.2f} s "
                 f"({extra['backends_cpu'] / jobs * 1000:.2f} ms/job), "
                 f"{extra['commits']} commits, {extra['rows']} row writes "
                 f"({extra['rows'] / jobs:.2f}/job)")
        loop = extra["loop"]
        if loop:
            waits = loop["voluntary_ctxt_switches"] / jobs
            line += (f"; per job: {extra['commits'] / jobs:.2f} statements (the run's "
                     f"commits); from the first job on, per job: {waits:.2f} waits "
                     f"(voluntary switches), {loop['syscr'] / jobs:.2f} reads and "
                     f"{loop['syscw'] / jobs:.2f} writes (syscalls)")
        if extra["wakeups"]:
            line += "; wake-ups per job: " + ", ".join(
                f"{reason} {count / jobs:.2f}" for reason, count in
                sorted(extra["wakeups"].items()))
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--ms", type=float, default=20.0)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--code", nargs="*", default=[str(common.ROOT)])
    parser.add_argument("--no-pool", action="store_true", help="skip the Pool's runs")
    parser.add_argument("--wakeups", action="store_true",
                        help="scrape the loop's wake-ups by reason (metrics port)")
    args = parser.parse_args()
    n = round(iterations_per_ms() * args.ms)
    names = {code: f"{DATABASE}_{i}" for i, code in enumerate(args.code)}
    dsns = {code: common.scratch_database_for(args.dsn, name, code)
            for code, name in names.items()}
    print(f"load average {os.getloadavg()}", flush=True)
    try:
        for _ in range(args.rounds):
            if not args.no_pool:
                print(describe("Pool(2)", *through_pool(n, args.jobs)), flush=True)
            for code, dsn in dsns.items():
                os.environ["BENCH_CODE"] = code
                label = f"supervisor ({os.path.basename(code.rstrip('/'))})"
                print(describe(label, *through_supervisor(dsn, n, args.jobs,
                                                                  args.wakeups)), flush=True)
        print(f"load average {os.getloadavg()}", flush=True)
    finally:
        os.environ.pop("BENCH_CODE", None)
        for name in names.values():
            common.drop_database(args.dsn, name)


if __name__ == "__main__":
    main()

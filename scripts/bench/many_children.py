"""Many children (issue 48): how well ``supervisor run -n N`` keeps N children fed, how
long its start-up takes as N grows, and one supervisor's no-op ceiling.

Every run is ``supervisor run --burst -n N`` on pre-enqueued jobs, timed from its
``exec``. Each job records its own pid, start and end, so from the records:

* start: exec to the first job's start (the report gives the median of the rounds),
  and for the sleeping jobs the CPU the supervisor's tree (parent and children) had
  used by then (read by the first jobs from ``/proc``: unlike the wall time, it hardly
  depends on what else the machine runs);
* efficiency: from the first job's start to the last job's end, the ideal time (every
  one of the N children busy all the time: jobs x length / N) over the time taken;
* parent CPU per job and backends' CPU per job: the supervisor process's own CPU, and
  that of the PostgreSQL backends connected to the run's database, from the first job's
  start to the run's end, read from ``/proc`` every 20 ms (``job_timeline.process_cpu``),
  over the number of jobs.

The workloads: sleeping jobs (``many_children_app``; the children take no CPU, which
leaves the two CPUs here to the parent and PostgreSQL as a many-core machine would) at
``-n 2``, ``-n 16`` and ``-n 64``, each also through ``multiprocessing.Pool(N)`` in every
round (chunksize 1, pool start excluded: ``pool_sleep_span``), the reference issue 48's
title names (on two cores N sleeping Python processes do not reach the ideal either:
each wakes to a cold cache and waits for a CPU); CPU jobs of ``--cpu-ms`` at ``-n 2`` against
``multiprocessing.Pool(2)`` on the same function (chunksize 1, pool start excluded,
``job_timeline.through_pool``): efficiency there is the Pool's span over ours; and
no-op jobs at ``-n 2/8/16/64``, jobs/s from exec to exit (start-up included) and from
the first to the last ``finished_at`` (the database's clock, start-up left out).

``--code DIR [DIR ...]``: each checkout in turn within every round, on a database its
own code migrated, for a before/after comparison in one run.

Usage: python scripts/bench/many_children.py [--rounds 3] [--code DIR ...]
       [--parts sleep,cpu,noop,start] [--noop-jobs 8000]

``start`` (not in the default parts): start-up alone, a short run of 4 sleeping jobs
of 5 ms per child at each of ``-n 2/16/64``, for more rounds in less time (its
efficiency figure means little: the run is mostly its ramp and its end).
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
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
import job_timeline

from shared.enqueue import enqueue_many

DATABASE = "supervisor_bench_many_children"
APP_DIR = Path(__file__).resolve().parent / "many_children_app"
WATCH_INTERVAL = 0.02


@dataclass(frozen=True)
class Workload:
    """One kind of run: ``jobs`` jobs of ``ms`` each through ``-n children``."""

    name: str
    kind: str  # "sleep", "cpu" or "noop"
    children: int
    jobs: int
    ms: float = 0.0

    @property
    def ideal(self) -> float:
        """Seconds the jobs take with every child busy all the time."""
        return self.jobs * self.ms / 1000 / self.children


STARTS = tuple(Workload(f"start-up: sleep 5 ms x {4 * n}, -n {n}", "sleep", n, 4 * n, 5.0)
               for n in (2, 16, 64))
SLEEPS = (Workload("sleep 5 ms x 1,000, -n 2", "sleep", 2, 1000, 5.0),
          Workload("sleep 5 ms x 8,000, -n 16", "sleep", 16, 8000, 5.0),
          Workload("sleep 20 ms x 8,000, -n 64", "sleep", 64, 8000, 20.0))


@dataclass
class Measured:
    """One run's figures."""

    start: float  # exec to the first job's start, s
    start_cpu: float | None  # the tree's CPU by the first job's start, s (sleeping jobs)
    span: float  # first job's start to last job's end, s (0 for no-op runs)
    wall: float  # exec to exit, s
    parent_cpu: float  # the supervisor's CPU from the first job's start on, s
    backends_cpu: float  # the run's backends' CPU from the first job's start on, s
    jobs: int


@dataclass
class Sampler:
    """The supervisor's and its backends' CPU, read from /proc until it exits."""

    dsn: str
    pid: int
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # t, parent, pg
    _backends: dict[int, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        """Sample every ``WATCH_INTERVAL`` until ``stop``; the backends' list is asked
        for every 10 samples (other work on this shared server is not the run's)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            pids: set[int] = set()
            while not self._stop.is_set():
                parent = job_timeline.process_cpu(self.pid)
                if parent is None:
                    break
                if len(self.samples) % 10 == 0:
                    pids.update(pid for (pid,) in conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                        " AND pid <> pg_backend_pid()").fetchall())
                for pid in pids:
                    cpu = job_timeline.process_cpu(pid)
                    if cpu is not None:
                        self._backends[pid] = cpu
                self.samples.append((time.time(), parent, sum(self._backends.values())))
                time.sleep(WATCH_INTERVAL)

    def stop(self) -> None:
        """End the sampling (the run is over)."""
        self._stop.set()

    def since(self, moment: float) -> tuple[float, float]:
        """(parent, backends) CPU seconds from ``moment`` to the last sample."""
        if not self.samples:
            return 0.0, 0.0
        before = [s for s in self.samples if s[0] <= moment] or [self.samples[0]]
        last = self.samples[-1]
        return last[1] - before[-1][1], last[2] - before[-1][2]


def run_supervisor(dsn: str, workload: Workload, queue: str) -> tuple[float, float, Sampler]:
    """Run ``supervisor run --burst`` on ``queue``: (exec time, exit time, its sampler)."""
    env = common.supervisor_env(dsn)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(APP_DIR)])
    command = common.supervisor_cmd("--app", "many_children_jobs", "--burst", "-q", queue,
                                    "-n", str(workload.children))
    began = time.time()
    proc = subprocess.Popen(command, env=env, cwd=str(APP_DIR), stderr=subprocess.PIPE,
                            text=True)
    sampler = Sampler(dsn, proc.pid)
    watcher = threading.Thread(target=sampler.run)
    watcher.start()
    _, err = proc.communicate(timeout=600)
    ended = time.time()
    sampler.stop()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"supervisor run failed ({proc.returncode}):\n{err[-2000:]}")
    return began, ended, sampler


def records(dsn: str) -> list[tuple[float, float, float | None]]:
    """(start, end, the tree's CPU in s if it was read) of every job, from the results
    they returned."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT result::text, state FROM supervisor.jobs").fetchall()
    if any(state != "completed" for _, state in rows):
        raise SystemExit("a job did not complete")
    found = []
    for text, _ in rows:
        record = orjson.loads(text)
        if len(record) == 5:  # timed_spin's: [cpu, wall, pid, start, end]
            found.append((record[3], record[4], None))
        else:
            cpu = record[3]
            found.append((record[1], record[2], None if cpu is None else cpu / 1e9))
    return found


def timed(dsn: str, workload: Workload, iterations: int) -> Measured:
    """A sleeping or CPU run of ``workload`` through the supervisor."""
    common.reset(dsn)
    if workload.kind == "sleep":
        # The first jobs (one per child: any of them may start first) read the CPU.
        probes = [{"seconds": workload.ms / 1000, "probe": True}] * workload.children
        rest = [{"seconds": workload.ms / 1000}] * (workload.jobs - workload.children)
        enqueue_many("sleep_timed", probes + rest, queue="bench_sleep", dsn=dsn)
        queue = "bench_sleep"
    else:
        enqueue_many("run_cpu_timed", [{"n": iterations}] * workload.jobs,
                     queue="bench_timed", dsn=dsn)
        queue = "bench_timed"
    began, ended, sampler = run_supervisor(dsn, workload, queue)
    found = records(dsn)
    first, _, start_cpu = min(found)
    last = max(end for _, end, _ in found)
    parent, backends = sampler.since(first)
    return Measured(first - began, start_cpu, last - first, ended - began, parent, backends,
                    len(found))


def noop(dsn: str, workload: Workload) -> tuple[Measured, float]:
    """A no-op run: its figures and jobs/s between the first and last ``finished_at``."""
    common.reset(dsn)
    enqueue_many("run_noop", [{}] * workload.jobs, queue="bench", dsn=dsn)
    began, ended, sampler = run_supervisor(dsn, workload, "bench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        done, spread = conn.execute(
            "SELECT count(*) FILTER (WHERE state = 'completed'), "
            "extract(epoch FROM max(finished_at) - min(finished_at)) FROM supervisor.jobs"
        ).fetchone()
    if done != workload.jobs:
        raise SystemExit(f"only {done} of {workload.jobs} no-op jobs completed")
    parent, backends = sampler.since(began)
    measured = Measured(0.0, None, 0.0, ended - began, parent, backends, done)
    return measured, done / float(spread) if spread else float("nan")


def pool_span(workload: Workload, iterations: int) -> float:
    """``multiprocessing.Pool(2)`` on the same CPU jobs: first start to last end."""
    found, _ = job_timeline.through_pool(iterations, workload.jobs)
    return max(r[4] for r in found) - min(r[3] for r in found)


def sleep_record(seconds: float) -> tuple[float, float]:
    """A sleeping job for ``multiprocessing.Pool``: (start, end), epoch seconds."""
    started = time.time()
    time.sleep(seconds)
    return started, time.time()


def pool_sleep_span(workload: Workload) -> float:
    """``multiprocessing.Pool(N)`` on the same sleeping jobs (chunksize 1, as a
    supervisor hands them out one by one): first start to last end."""
    with multiprocessing.get_context("fork").Pool(workload.children) as pool:
        found = pool.map(sleep_record, [workload.ms / 1000] * workload.jobs, chunksize=1)
    return max(end for _, end in found) - min(start for start, _ in found)


def tree_cpu(runs: list[Measured]) -> str:
    """The median CPU the tree had used by the first job, or a dash if not read."""
    cpus = [m.start_cpu for m in runs if m.start_cpu is not None]
    return f"{statistics.median(cpus) * 1000:.0f} ms" if cpus else "-"


def label_of(code: str) -> str:
    return os.path.basename(code.rstrip("/"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--code", nargs="*", default=[str(common.ROOT)])
    parser.add_argument("--parts", default="sleep,cpu,noop")
    parser.add_argument("--cpu-ms", type=float, default=20.0)
    parser.add_argument("--cpu-jobs", type=int, default=250)
    parser.add_argument("--noop-jobs", type=int, default=8000)
    parser.add_argument("--noop-children", default="2,8,16,64")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    iterations = round(job_timeline.iterations_per_ms() * args.cpu_ms)
    cpu = Workload(f"CPU {args.cpu_ms:g} ms x {args.cpu_jobs}, -n 2", "cpu", 2, args.cpu_jobs,
                   args.cpu_ms)
    noops = [Workload(f"no-op x {args.noop_jobs:,}, -n {n}", "noop", int(n), args.noop_jobs)
             for n in args.noop_children.split(",")]
    names = {code: f"{DATABASE}_{i}" for i, code in enumerate(args.code)}
    dsns = {code: common.scratch_database_for(args.dsn, name, code)
            for code, name in names.items()}
    timed_runs: dict[tuple[str, str], list[Measured]] = defaultdict(list)
    noop_runs: dict[tuple[str, str], list[tuple[Measured, float]]] = defaultdict(list)
    pool: list[float] = []
    pool_sleeps: dict[str, list[float]] = defaultdict(list)  # workload name: spans
    print(f"load average before {os.getloadavg()}", flush=True)
    try:
        for round_no in range(args.rounds):
            for code, dsn in dsns.items():
                os.environ["BENCH_CODE"] = code
                sleeps = (SLEEPS if "sleep" in parts else ()) + (
                    STARTS if "start" in parts else ())
                for workload in sleeps:
                    m = timed(dsn, workload, iterations)
                    timed_runs[(workload.name, code)].append(m)
                    print(f"round {round_no} {label_of(code)} {workload.name}: start "
                          f"{m.start:.3f} s (tree CPU {m.start_cpu or 0:.3f} s), "
                          f"{workload.ideal / m.span:.3f} of ideal", flush=True)
                if "cpu" in parts:
                    timed_runs[(cpu.name, code)].append(timed(dsn, cpu, iterations))
                for workload in (noops if "noop" in parts else ()):
                    noop_runs[(workload.name, code)].append(noop(dsn, workload))
            if "cpu" in parts:
                pool.append(pool_span(cpu, iterations))
            for workload in (SLEEPS if "sleep" in parts else ()):
                span = pool_sleep_span(workload)
                pool_sleeps[workload.name].append(span)
                print(f"round {round_no} Pool({workload.children}) {workload.name}: "
                      f"{workload.ideal / span:.3f} of ideal", flush=True)
        print(f"load average after {os.getloadavg()}", flush=True)
    finally:
        os.environ.pop("BENCH_CODE", None)
        for name in names.values():
            common.drop_database(args.dsn, name)
    med = statistics.median
    print("| run | checkout | exec to first job (median) | tree CPU by then (median) "
          "| efficiency (median, all) | parent CPU/job | backends CPU/job |")
    print("|---|---|---|---|---|---|---|")
    for (name, code), runs in timed_runs.items():
        workload = cpu if name == cpu.name else next(
            w for w in SLEEPS + STARTS if w.name == name)
        if workload.kind == "cpu":
            ratios = [p / m.span for p, m in zip(pool, runs, strict=False)]
            what = "vs Pool(2) "
        else:
            ratios = [workload.ideal / m.span for m in runs]
            what = ""
        print(f"| {name} | {label_of(code)} | {med(m.start for m in runs) * 1000:.0f} ms "
              f"({', '.join(f'{m.start * 1000:.0f}' for m in runs)}) | "
              f"{tree_cpu(runs)} | {what}"
              f"{med(ratios):.3f} ({', '.join(f'{r:.3f}' for r in ratios)}) | "
              f"{med(m.parent_cpu / m.jobs for m in runs) * 1000:.2f} ms | "
              f"{med(m.backends_cpu / m.jobs for m in runs) * 1000:.2f} ms |")
    for name, spans in pool_sleeps.items():
        workload = next(w for w in SLEEPS if w.name == name)
        ratios = [workload.ideal / span for span in spans]
        print(f"| {name} | Pool({workload.children}) | - | - | {med(ratios):.3f} "
              f"({', '.join(f'{r:.3f}' for r in ratios)}) | - | - |")
        for (run_name, code), runs in timed_runs.items():
            if run_name == name:  # ours over the Pool's, round by round
                over = [span / m.span for span, m in zip(spans, runs, strict=False)]
                print(f"| {name} | {label_of(code)} over Pool({workload.children}) | - | - "
                      f"| {med(over):.3f} ({', '.join(f'{r:.3f}' for r in over)}) | - | - |")
    if noop_runs:
        print("\n| no-op run | checkout | jobs/s exec to exit (median) | jobs/s first to last "
              "finished_at | parent CPU/job | backends CPU/job |")
        print("|---|---|---|---|---|---|")
    for (name, code), pairs in noop_runs.items():
        runs = [m for m, _ in pairs]
        print(f"| {name} | {label_of(code)} | {med(m.jobs / m.wall for m in runs):,.0f} | "
              f"{med(r for _, r in pairs):,.0f} | "
              f"{med(m.parent_cpu / m.jobs for m in runs) * 1000:.3f} ms | "
              f"{med(m.backends_cpu / m.jobs for m in runs) * 1000:.3f} ms |")


if __name__ == "__main__":
    main()

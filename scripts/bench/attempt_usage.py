"""What recording each attempt's usage and output costs the no-op drain, side by side.

Two measures per checkout given with ``--code`` (each drains a database its own code
migrated, ``common.scratch_database_for``), in rounds whose order alternates so a burst
of load from elsewhere falls on every checkout alike:

- the no-op drain rate of ``supervisor run -n 2 --burst`` at defaults, start-up included;
- the CPU time the supervisor and its children used per job (user + system, from
  ``getrusage(RUSAGE_CHILDREN)`` around the run): on a loaded machine it varies far less
  than the rate, and it is where the child's measuring and the parent's carrying show.

Then, on this checkout's store alone, the completion statement with and without usage
and output (batches of 512, claim + complete loop): the database's part of the cost.

Usage: python scripts/bench/attempt_usage.py [--jobs 20000] [--rounds 7]
       [--code MAIN_DIR THIS_DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import bench_enqueue
import common
import psycopg

from shared.enqueue import enqueue_many
from shared.usage import Usage
from supervisor.db import Completion, Store

DATABASE = "supervisor_bench_attempt_usage"
USAGE = Usage(0.000123, 0.000456, 41_000_000)


def children_cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime


def drain(dsn: str, jobs: int) -> tuple[float, float]:
    """(jobs per second, CPU microseconds of the supervisor and its children per job)."""
    common.reset(dsn)
    enqueue_many("run_noop", [{}] * jobs, queue="bench", dsn=dsn)
    cpu0 = children_cpu()
    seconds = common.run_burst(dsn, "-q", "bench", "-n", "2")
    return jobs / seconds, (children_cpu() - cpu0) / jobs * 1e6


def complete_loop(dsn: str, jobs: int, with_usage: bool) -> float:
    """Claim + complete rate, batches of 512, with or without a usage per completion."""
    usage = USAGE if with_usage else None
    with psycopg.connect(dsn, autocommit=True) as conn:
        bench_enqueue.reset(conn)
        bench_enqueue.seed(conn, jobs)
        store = Store(conn, "bench")
        t0 = time.perf_counter()
        done = 0
        while claimed := store.claim("default", ["noop"], 512):
            store.complete([Completion(j.id, j.attempt, None, usage) for j in claimed])
            done += len(claimed)
        return done / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--code", nargs="*", default=[str(common.ROOT)])
    args = parser.parse_args()
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    dsns = {code: common.scratch_database_for(args.dsn, f"{DATABASE}_{i}", code)
            for i, code in enumerate(args.code)}
    rates: dict[str, list[float]] = {code: [] for code in args.code}
    cpus: dict[str, list[float]] = {code: [] for code in args.code}
    store: dict[bool, list[float]] = {False: [], True: []}
    here = dsns.get(str(common.ROOT)) or common.scratch_database(args.dsn, DATABASE)
    try:
        for i in range(args.rounds):
            order = args.code if i % 2 == 0 else args.code[::-1]
            for code in order:
                os.environ["BENCH_CODE"] = code
                rate, cpu = drain(dsns[code], args.jobs)
                rates[code].append(rate)
                cpus[code].append(cpu)
            for with_usage in ((False, True) if i % 2 == 0 else (True, False)):
                store[with_usage].append(complete_loop(here, args.jobs, with_usage))
            print(f"round {i + 1}: " + "; ".join(
                f"{Path(c).name} {rates[c][-1]:,.0f}/s {cpus[c][-1]:.0f} us CPU/job"
                for c in args.code) + f"; store {store[False][-1]:,.0f}/s without usage, "
                f"{store[True][-1]:,.0f}/s with; load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        os.environ.pop("BENCH_CODE", None)
        common.drop_database(args.dsn, DATABASE)
        for i in range(len(args.code)):
            common.drop_database(args.dsn, f"{DATABASE}_{i}")
    for code in args.code:
        print(f"{Path(code).name}: no-op drain {common.median(rates[code]):,.0f} jobs/s, "
              f"supervisor + children {common.median(cpus[code]):.0f} us CPU per job "
              f"(medians of {args.rounds}; rates {sorted(round(r) for r in rates[code])})")
    print(f"store claim + complete, batch 512: {common.median(store[False]):,.0f} jobs/s "
          f"without usage, {common.median(store[True]):,.0f} jobs/s with")
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()

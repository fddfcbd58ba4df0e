"""What a memory budget costs the no-op drain (issue 51): under a memory budget (the
flag here; a container's limit does the same) a kind's first job runs alone and, while
the budget can refuse a start, every start goes through the admission book (one job per
child, no prefetch). Side by side with no budget, rounds alternating; with ``--code``,
each checkout given (a before/after comparison in one run).

Usage: python scripts/bench/memory_budget_drain.py [--jobs 5000] [--rounds 3] [--code DIR ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue_many

DATABASE = "supervisor_bench_memory_budget"
CASES = {"no budget": (), "--memory-budget 4GiB": ("--memory-budget", "4GiB")}


def drain(dsn: str, jobs: int, flags: tuple[str, ...]) -> float:
    """No-op jobs per second of ``supervisor run -n 2 --burst``, start-up included."""
    common.reset(dsn)
    enqueue_many("run_noop", [{}] * jobs, queue="bench", dsn=dsn)
    return jobs / common.run_burst(dsn, "-q", "bench", "-n", "2", *flags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--code", nargs="*", default=[str(common.ROOT)])
    args = parser.parse_args()
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    # Each checkout drains a database its own code migrated (see scratch_database_for).
    dsns = {code: common.scratch_database_for(args.dsn, f"{DATABASE}_{i}", code)
            for i, code in enumerate(args.code)}
    cases = [(code, case) for code in args.code for case in CASES]
    names = {item: item[1] if len(args.code) == 1 else f"{item[0]}, {item[1]}"
             for item in cases}
    rates: dict[str, list[float]] = {names[item]: [] for item in cases}
    try:
        for i in range(args.rounds):
            for code, case in cases if i % 2 == 0 else cases[::-1]:
                os.environ["BENCH_CODE"] = code
                rates[names[code, case]].append(drain(dsns[code], args.jobs, CASES[case]))
            print(f"round {i + 1}: " + "; ".join(f"{c} {r[-1]:,.0f}/s"
                                                 for c, r in rates.items()), flush=True)
    finally:
        os.environ.pop("BENCH_CODE", None)
        for i in range(len(args.code)):
            common.drop_database(args.dsn, f"{DATABASE}_{i}")
    for case in rates:
        print(f"{case}: {common.median(rates[case]):,.0f} jobs/s (median of {args.rounds}; "
              f"{sorted(round(r) for r in rates[case])})")
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()

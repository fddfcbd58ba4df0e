"""No-op drain with default settings against the database's own limit, in one run.

Each round measures, on one scratch database: the raw claim+complete limit (the store's
claim and complete statements in a tight loop, batches of 512, no supervisor), then
``supervisor run -n 2 --burst`` with no other flag draining the same number of no-op jobs,
start-up included, for each checkout given with ``--code``. Rounds alternate so that a
burst of load from elsewhere on the machine falls on every figure alike; the report is
the median of the rounds, each checkout's rate as a share of the limit, and the load
average before and after.

Usage: python scripts/bench/drain_ceiling.py [--jobs 20000] [--rounds 5] [--code DIR ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import bench_run
import common
import efficiency

DATABASE = "supervisor_bench_drain_ceiling"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--code", nargs="*", default=[str(common.ROOT)])
    # Two sessions benchmarking at once must not share (and drop) each other's databases.
    parser.add_argument("--database", default=DATABASE, help="scratch database name prefix")
    args = parser.parse_args()
    database = args.database
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    dsn = common.scratch_database(args.dsn, database)
    # Each checkout drains a database its own code migrated (see scratch_database_for).
    dsns = {code: common.scratch_database_for(args.dsn, f"{database}_{i}", code)
            for i, code in enumerate(args.code)}
    ceiling: list[float] = []
    rates: dict[str, list[float]] = {code: [] for code in args.code}
    try:
        for _ in range(args.rounds):
            ceiling.append(bench_run.store_ceiling(dsn, args.jobs))
            for code in args.code:
                os.environ["BENCH_CODE"] = code
                rates[code].append(efficiency.noop_default(dsns[code], args.jobs))
            print(f"round: limit {ceiling[-1]:,.0f}/s; " + "; ".join(
                f"{Path(c).name} {r[-1]:,.0f}/s" for c, r in rates.items()), flush=True)
    finally:
        os.environ.pop("BENCH_CODE", None)
        common.drop_database(args.dsn, database)
        for i in range(len(args.code)):
            common.drop_database(args.dsn, f"{database}_{i}")
    limit = common.median(ceiling)
    print(f"raw claim+complete limit (store loop, batch 512): {limit:,.0f} jobs/s")
    for code, values in rates.items():
        rate = common.median(values)
        print(f"no-op x {args.jobs:,}, -n 2 defaults, start-up included ({Path(code).name}): "
              f"{rate:,.0f} jobs/s, {rate / limit:.2f} of the limit")
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()

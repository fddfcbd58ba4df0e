"""What the CPU and memory percentiles cost the kinds page (``/kinds``, and
``/kinds/<name>`` for one kind): ``supervisor.admin.pages.kinds`` as shipped, and the
usage percentiles it adds (``supervisor.admin.usage.kind_usage``: the newest 10,000
jobs finished in the last hour) alone, for every kind and for one, interleaved.

Seeds a scratch database with ``--jobs`` jobs finished over the last day (40 kinds,
each with a usage as the supervisor writes it), then times each call ``--rounds``
times. Reports medians and the load average before and after.

Usage: python scripts/bench/kinds_usage_cost.py [--jobs 100000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common

from supervisor.admin import pages, usage

DATABASE = "supervisor_bench_kinds_usage"
_SEED = """
INSERT INTO supervisor.jobs (kind, queue, state, attempt, run_at, attempted_at,
                             finished_at, usage)
SELECT 'k' || (g %% 40), 'default', CASE WHEN g %% 30 = 0 THEN 'discarded'
                                          ELSE 'completed' END, 1,
       now() - (g %% 86000) * interval '1 second',
       now() - (g %% 86000) * interval '1 second',
       now() - (g %% 86000) * interval '1 second' + interval '2 ms',
       """ + common.USAGE_AS_WRITTEN_SQL + """
FROM generate_series(1, %(jobs)s) AS g
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    load_before = os.getloadavg()
    calls = {"pages.kinds (shipped)": lambda conn: pages.kinds(conn),
             "kind_usage, every kind": lambda conn: usage.kind_usage(conn),
             "kind_usage, one kind": lambda conn: usage.kind_usage(conn, kind="k7")}
    dsn = common.scratch_database(args.dsn, DATABASE)
    times: dict[str, list[float]] = {name: [] for name in calls}
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_SEED, {"jobs": args.jobs})
            conn.execute("VACUUM ANALYZE supervisor.jobs")
            for _ in range(args.rounds):
                for name, call in calls.items():
                    started = time.perf_counter()
                    call(conn)
                    times[name].append(time.perf_counter() - started)
    finally:
        common.drop_database(args.dsn, DATABASE)
    print(f"jobs {args.jobs}, rounds {args.rounds}, load before {load_before[0]:.1f}, "
          f"after {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    for name, values in times.items():
        print(f"{name:>22}: median {common.median(values) * 1000:.0f} ms, "
              f"max {max(values) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
